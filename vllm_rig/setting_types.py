"""Types of settings that say once what they allow.

A type is the value's Python type with its bounds (pydantic's Field, Literal) and a `Rule`: the sentence that
says what is allowed (the settings table's "allowed" column, docs/settings.md) and, where a format needs one,
the check that refuses anything else with that sentence ("must be <allowed>"). A setting says its own sentence
only where its null or its neighbours need saying. pydantic's StringConstraints(pattern=...) would refuse with
"String should match pattern '^...$'", a regex where the owner needs words; a Rule's check says the words, and
says them inside a mapping's entry too.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, NotRequired

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    ValidationInfo,
    with_config,
)
from pydantic.fields import FieldInfo
from pydantic_core import core_schema
from typing_extensions import TypedDict

from vllm_rig.known import git_tags, upstream_compile


@dataclass(frozen=True)
class Rule:
    """What a type allows, in words, and (`test`) the check that refuses the rest with those words."""

    allowed: str
    test: Callable[[Any], object] | None = None

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        schema = handler(source)
        return core_schema.no_info_after_validator_function(self._check, schema) if self.test else schema

    def _check(self, value: Any) -> Any:
        if self.test and not self.test(value):
            raise ValueError(f"must be {self.allowed}")
        return value


def matches(pattern: str) -> Callable[[str], object]:
    return re.compile(pattern).fullmatch


def between(low: float, high: float | None, unit: str = "an integer") -> Rule:
    """A range in words: "seconds from 60 to 3600", or "seconds, at least 300" when it has no upper end."""
    if high is None:
        return Rule(f"{unit}, at least {low}", lambda v: v >= low)
    return Rule(f"{unit} from {low} to {high}", lambda v: low <= v <= high)


def pinned_in(repo: str) -> AfterValidator:
    """A commit of `repo` (a known tag is refused with its commit: known/git_tags.py)."""
    return refusing(lambda ref: git_tags.ref_problem(ref, repo))


def allowed_of(field: FieldInfo) -> str:
    """The setting's own allowed sentence, else its type's."""
    extra = field.json_schema_extra
    if isinstance(extra, dict) and "allowed" in extra:
        return str(extra["allowed"])
    rule = next((m for m in field.metadata if isinstance(m, Rule)), None)
    return rule.allowed if rule else "a valid value"


def _is_version(value: str) -> bool:
    try:
        Version(value)
    except InvalidVersion:
        return False
    return True


def is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _as_text(value: Any) -> Any:
    """`--data cuda_version=12.9` arrives as the float 12.9 (pyinfra parses JSON); these are names."""
    return str(value) if isinstance(value, float) else value


def refusing(problem: Callable[[Any], str | None]) -> AfterValidator:
    """A check that says in its own words what is wrong (`problem`'s line), or nothing."""

    def check(value: Any) -> Any:
        line = problem(value)
        if line:
            raise ValueError(line)
        return value

    return AfterValidator(check)


def distinct(items: list[Any]) -> list[Any]:
    repeated = sorted({str(item) for item in items if items.count(item) > 1})
    if repeated:
        raise ValueError(f"names {', '.join(repeated)} more than once: each once")
    return items


# Where a URL setting's credentials belong instead: a URL is on command lines (ps), in units and in logs.
URL_SECRET_HINT = {"hf_endpoint": "put the token in hf_token (kept in a root-only file on the host)"}


def check_url(value: str, key: str | None = None) -> str:
    if not re.match(r"^https?://[^\s/]+(/\S*)?$", value):
        raise ValueError("must be an http:// or https:// URL")
    if "@" in urllib.parse.urlsplit(value).netloc:
        hint = URL_SECRET_HINT.get(key or "", "use a mirror the hosts reach without credentials")
        raise ValueError(f"must not hold credentials (user:password@ ends up in ps, units and logs): {hint}")
    return value


def _url(value: str, info: ValidationInfo) -> str:
    return check_url(value, info.field_name)


def _network(entry: str) -> str:
    """A network in CIDR form as written (nginx's allow takes it so): no host bits set."""
    try:
        ipaddress.ip_network(entry, strict=True)
    except ValueError:
        try:
            loose = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise ValueError(f"{entry!r} is not a network in CIDR form such as 192.168.1.0/24") from None
        raise ValueError(f"{entry!r} has host bits set: the network is {loose}") from None
    return entry


def _key_name(name: str) -> str:
    if not KEY_NAME.fullmatch(name) or name == "server":
        raise ValueError(
            f"{name!r} is not a key name: a short lowercase word (a-z first, then a-z, 0-9 or -, up to 32), "
            'not "server" (the server\'s own key)'
        )
    return name


def _mirror_prefix(value: str, info: ValidationInfo) -> str:
    if value and (not value.endswith("/") or not value.startswith(("http://", "https://"))):
        raise ValueError('must be "" or an http(s) URL ending in "/"')
    return _url(value, info) if value else value


SHA40 = r"[0-9a-f]{40}"
SHA256 = r"[0-9a-f]{64}"
KEY_NAME = re.compile(r"[a-z][a-z0-9-]{0,31}")  # the host program lan_keys's NAME: a file name and a log word
DNS_NAME = re.compile(
    r"^(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)

Switch = Annotated[bool, Rule("true or false")]
Port = Annotated[int, between(1, 65535)]
PositiveInt = Annotated[int, Field(ge=1)]
# Names that arrive as numbers from --data (12.9, 7.5): kept as the text the owner typed.
NumberAsText = BeforeValidator(_as_text)
ComputeCapability = Literal["7.0", "7.5", "8.0", "8.6", "8.9", "9.0"]

Commit = Annotated[str, Rule("a full 40-character lower-case commit SHA (a branch or tag can move)", matches(SHA40))]
Sha256 = Annotated[str, Rule("a 64-hex-digit lower-case sha256", matches(SHA256))]
KeyFingerprint = Annotated[
    str, Rule("an OpenPGP key fingerprint: 40 upper-case hex digits, no spaces", matches(r"[0-9A-F]{40}"))
]
Pep440 = Annotated[str, Rule("a PEP 440 version such as 2.11.0", _is_version)]
Url = Annotated[str, AfterValidator(_url), Rule("an http(s) URL")]
MirrorPrefix = Annotated[str, AfterValidator(_mirror_prefix)]  # put in front of every git URL
GitUrl = Annotated[str, AfterValidator(_url), Rule("a git URL (https://...)")]
# Paths on the box: they are spliced into commands, units, PATH and the rollback script, so they hold only
# characters no consumer reads specially (no space, quote, $, %, ;, :, backslash or control character).
BoxPath = Annotated[
    str,
    Rule(
        "an absolute path of letters, digits and . _ + @ - / (no spaces, quotes, $, % or ;)",
        matches(r"/[A-Za-z0-9._+@/-]*"),
    ),
]
# A path or file name on the control machine: read there, never sent to a host.
ControlPath = Annotated[str, Rule("a path on the control machine", lambda v: bool(v.strip()))]
UnitName = Annotated[
    str, Rule("a lower-case name: a-z first, then a-z, 0-9, - and _ (max 32)", matches(r"[a-z][a-z0-9_-]{0,31}"))
]
# What clients ask for: vLLM's --served-model-name, the unit's Description=, bench and probe commands.
ServedName = Annotated[
    str, Rule("a name of up to 128 letters, digits and . _ : / @ + -", matches(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}"))
]
KeyName = Annotated[str, AfterValidator(_key_name)]
IpAddress = Annotated[str, Rule("an IP address, e.g. 0.0.0.0 (all) or 127.0.0.1 (local only)", is_ip)]
Networks = list[Annotated[str, AfterValidator(_network)]]
# An inventory host's name as front_of lists it (it names files and nginx sockets on the front).
InventoryName = Annotated[
    str, Rule("an inventory host name (letters, digits and . _ : @ -)", matches(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}"))
]
DnsOrIp = Annotated[
    str, Rule("a DNS name (letters, digits, - and dots) or an IP address", lambda v: is_ip(v) or DNS_NAME.match(v))
]


def locks_dir_problem(value: str) -> str | None:
    """What is wrong with locks_dir, or None: a directory on the control machine (relative ones from the project's
    root), there already or to be made by the first lock written into it."""
    if not value.strip() or value != value.strip():
        return "must be a directory on the control machine, e.g. locks"
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", value):
        return "must be a directory on the control machine, not a URL: the locks are read and written here"
    path = Path(value)
    found = path if path.is_absolute() else Path(__file__).resolve().parents[1] / path
    if found.exists() and not found.is_dir():
        return f"must be a directory on the control machine; {found} is a file"
    return None


def artifact_store_problem(value: str) -> str | None:
    """What is wrong with runtime_artifact_store, or None: a directory, or an http(s) URL of a directory."""
    if not value.strip():
        return "must be a directory on the control machine or an http(s) URL"
    if not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", value):
        return None  # a path (a colon only after a slash is a path too)
    url = urllib.parse.urlsplit(value)
    if url.scheme not in ("http", "https"):
        return f"a URL store must be http:// or https://, not {url.scheme}:"
    if "@" in url.netloc:
        return "must not hold credentials: put user:password in runtime_artifact_store_auth"
    if not url.hostname:
        return "must name a host, e.g. https://store.lan/vllm-rig/"
    if url.query or url.fragment or not url.path.endswith("/"):
        return 'must be the store\'s directory: a path ending in "/", no ?query or #fragment'
    return None


# ---- the mapping settings: one typed entry each (extra keys refused), still plain dicts to the stages

ENTRY = ConfigDict(extra="forbid", strict=True)


@with_config(ENTRY)
class FetchSource(TypedDict):
    """A source CMake would fetch, checked out ahead from the git cache and given to CMake by a variable."""

    repo: GitUrl
    ref: str  # a commit: git_tags.ref_problem, which needs the repo to name a known tag's commit
    env: Annotated[str, Rule("a variable name such as FLASH_MLA_SRC_DIR", matches(r"[A-Z][A-Z0-9_]*"))]
    min_arch: NotRequired[Annotated[str, Rule("a compute capability such as 8.0", matches(r"\d+\.\d"))] | None]


def _source_problem(entry: FetchSource) -> str | None:
    problem = git_tags.ref_problem(entry["ref"], entry["repo"])
    return f'"ref": {problem}' if problem else None


FetchSources = dict[str, Annotated[FetchSource, refusing(_source_problem)]]


def _required_sources_problem(sources: dict[str, FetchSource]) -> str | None:
    missing = [name for name in upstream_compile.REQUIRED_SOURCES if name not in sources]
    return (
        f"must name {', '.join(upstream_compile.REQUIRED_SOURCES)}; missing: {', '.join(missing)}" if missing else None
    )


CompileSources = Annotated[FetchSources, refusing(_required_sources_problem)]


@with_config(ENTRY)
class PatchFile(TypedDict):
    url: Url
    sha256: Sha256


@with_config(ENTRY)
class Sm75PatchFiles(TypedDict):
    vllm: PatchFile
    flashqla: PatchFile


@with_config(ENTRY)
class FixedFile(TypedDict):
    """One header of a FlashInfer SM75 fix: the fixed file whole (raw content at a commit), and the installed
    file's sha256 before and the fixed one's after."""

    url: Url
    before: Sha256
    after: Sha256


SourcePath = Annotated[
    str,
    Rule(
        "a path inside FlashInfer's source tree (include/...)",
        lambda v: not v.startswith("/") and ".." not in v.split("/"),
    ),
]


@with_config(ENTRY)
class Sm75Fix(TypedDict):
    patch: Literal["pr3621", "pr3526"]
    files: Annotated[dict[SourcePath, FixedFile], Field(min_length=1)]


def _diff_problem(fix: Sm75Fix) -> str | None:
    """A diff is not the fixed file: the url must end in the header's own path."""
    wrong = next((path for path, fixed in fix["files"].items() if not fixed["url"].endswith("/" + path)), None)
    return f"{wrong!r}: url must be the fixed file itself, ending in /{wrong} (not a diff)" if wrong else None


FlashInferPatches = dict[Pep440, Annotated[Sm75Fix, refusing(_diff_problem)]]


def _specifiers_problem(packages: dict[str, str]) -> str | None:
    """Each package name with the PEP 440 specifier that replaces the fork's requirement for it."""
    for name, spec in packages.items():
        try:
            requirement = Requirement(f"{name}{spec}")
            SpecifierSet(spec)
        except (InvalidRequirement, InvalidSpecifier):
            return f"{name!r}: {spec!r} is not a package name with a PEP 440 specifier such as ==4.5.2"
        if requirement.name != name or not spec:
            return f"{name!r}: {spec!r} must be a specifier such as ==4.5.2 or >=1.25"
    return None


RequirementOverrides = dict[Pep440, Annotated[dict[str, str], refusing(_specifiers_problem)]]


# Settings of their own format (one setting each).
DriverVersion = Annotated[str, Rule("an exact driver version such as 580.159.03", matches(r"\d{3}\.\d{2,3}(\.\d{2})?"))]
ReleaseLine = Annotated[
    str, Rule('a release line of the fork such as "v0.1" (its releases are the tags v0.1.N)', matches(r"v?\d+(\.\d+)*"))
]
RepoId = Annotated[
    str,
    Rule(
        "a repo id owner/name, e.g. Qwen/Qwen3.8-27B-FP8",
        matches(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*"),
    ),
]
GitRef = Annotated[
    str,
    Rule("a branch, tag or 40-character commit SHA", matches(r"(?!/)(?!.*\.\.)(?!.*//)[A-Za-z0-9._/-]{1,200}(?<!/)")),
]
# It goes into an EnvironmentFile= line: whitespace, quotes, $ or \ would change what systemd reads.
HfToken = Annotated[str, Rule("one word of letters, digits and - _ . (hf_...)", matches(r"[A-Za-z0-9_.-]{8,512}"))]
HostName = Annotated[str, Rule("a host name or an IP address", matches(r"[A-Za-z0-9][A-Za-z0-9.:-]*"))]
# mokutil reads it twice from stdin (PASSWORD_MIN 1, PASSWORD_MAX 256); one line, as every setting.
MokPassword = Annotated[str, Field(min_length=1, max_length=256)]
UserPassword = Annotated[str, Rule("user:password", lambda v: ":" in v[1:])]
BenchSizes = Annotated[
    str,
    Rule(
        'TOKENS:RUNS:MAX_TOKENS, comma-separated, e.g. "20000:3:256,60000:2:128"',
        matches(r"\d+:\d+:\d+(,\d+:\d+:\d+)*"),
    ),
]
BenchLabel = Annotated[
    str, Rule("1 to 40 letters, digits, dots, dashes or underscores, e.g. FP8-KV", matches(r"[A-Za-z0-9._-]{1,40}"))
]
