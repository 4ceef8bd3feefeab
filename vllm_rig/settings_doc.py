"""The settings table (docs/settings.md), made from the one place each part of a setting lives, and the check
that group_data/all.py agrees with that place.

- vllm_rig/settings.py: each field's description, its allowed sentence, and its stage (the
  `# ---- <stage>` comment the field stands under);
- group_data/all.py: each default, under the same stage heading, in the schema's order, its comment
  the field's description word for word.

    python -m vllm_rig.settings_doc           print the table
    python -m vllm_rig.settings_doc --write   rewrite it in docs/settings.md, between its marker comments
    python -m vllm_rig.settings_doc --check   exit 1 with one line per difference (docs/settings.md or all.py)
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import re
import sys
import tokenize
import types
from pathlib import Path
from typing import Any

from vllm_rig import settings as settings_module
from vllm_rig.setting_types import allowed_of
from vllm_rig.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "docs" / "settings.md"  # where the table lives (the README points to it)
ALL_PY = ROOT / "group_data" / "all.py"
SETTINGS_PY = Path(settings_module.__file__)

COMMAND = "python -m vllm_rig.settings_doc --write"
BEGIN = f"<!-- settings table: made by `{COMMAND}` from vllm_rig/settings.py and group_data/all.py -->"
END = "<!-- end of the settings table -->"

HEADING = re.compile(r"^# ---- ([^:]+?)\s*(:.*)?$")
# A mapping default longer than this shows its keys only (the values are in group_data/all.py).
DEFAULT_WIDTH = 60


def _comments(text: str) -> dict[int, tuple[int, str]]:
    """{line: (column, text)} of every comment in a Python source."""
    return {
        tok.start[0]: (tok.start[1], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(text).readline)
        if tok.type == tokenize.COMMENT
    }


def _stage_of(line: int, headings: list[tuple[int, str]]) -> str | None:
    """The stage of the last heading above `line`, or None above the first."""
    names = [name for at, name in headings if at < line]
    return names[-1] if names else None


def stages(text: str | None = None) -> dict[str, str | None]:
    """{field: stage} in field order, from the `# ---- <stage>` comments of the Settings class body."""
    text = SETTINGS_PY.read_text() if text is None else text
    body = next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "Settings")
    end = body.end_lineno or body.lineno  # ast sets it for a parsed class; typeshed says it may be None
    headings = [
        (line, m.group(1))
        for line, (column, comment) in _comments(text).items()
        if body.lineno < line <= end and column == 4 and (m := HEADING.match(comment))
    ]
    fields = [
        (n.target.id, n.lineno) for n in body.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    ]
    return {name: _stage_of(line, headings) for name, line in fields if name in Settings.model_fields}


def description(key: str) -> str:
    return Settings.model_fields[key].description or ""


def allowed(key: str) -> str:
    return allowed_of(Settings.model_fields[key])


def defaults(path: Path = ALL_PY) -> dict[str, Any]:
    """group_data/all.py's values as pyinfra reads them: top-level names, not _private ones or modules."""
    namespace: dict[str, Any] = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return {k: v for k, v in namespace.items() if not k.startswith("_") and not isinstance(v, types.ModuleType)}


def _literal(value: Any) -> str:
    """A value as group_data/all.py spells it (double-quoted strings)."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return repr(value)


def _default(value: Any) -> str:
    text = _literal(value)
    if isinstance(value, dict) and len(text) > DEFAULT_WIDTH:
        text = "{" + ", ".join(f"{_literal(k)}: …" for k in value) + "}"
    return f"`{text}`"


def _cell(text: str) -> str:
    """Plain text in a table cell: no column break, no strikethrough from `~`, no HTML tag from `<`."""
    return text.replace("|", "\\|").replace("~", "\\~").replace("<", "&lt;")


def table() -> str:
    """The settings table: one bold row per stage, then its settings in the schema's order."""
    values = defaults()
    lines = ["| setting | default | what it is | allowed |", "|---|---|---|---|"]
    current = None
    for key, stage in stages().items():
        if stage is None:
            raise ValueError(f"vllm_rig/settings.py: {key} stands above the first '# ---- <stage>' comment")
        if stage != current:
            lines.append(f"| **{stage}** | | | |")
            current = stage
        default = _default(values[key]).replace("|", "\\|") if key in values else "(missing in group_data/all.py)"
        lines.append(f"| `{key}` | {default} | {_cell(description(key))} | {_cell(allowed(key))} |")
    return "\n".join(lines) + "\n"


def readme_with_table(text: str) -> str:
    """The README text with the generated table between its two marker lines."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f"docs/settings.md must hold the marker lines {BEGIN!r} and then {END!r} once each")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n\n{table()}\n{END}{tail}"


def readme_problems(text: str | None = None) -> list[str]:
    text = README.read_text() if text is None else text
    try:
        made = readme_with_table(text)
    except ValueError as err:
        return [str(err)]
    if made == text:
        return []
    pairs = zip(text.splitlines(), made.splitlines(), strict=False)
    first = next((f"{old!r} should read {new!r}" for old, new in pairs if old != new), "rows missing or extra")
    return [f"docs/settings.md: the settings table differs from the schema ({first}); run {COMMAND}"]


def all_py_problems(text: str | None = None) -> list[str]:
    """One line per way group_data/all.py departs from the schema: a setting missing, unknown or set
    twice, out of the schema's order, under another stage's heading, or commented otherwise than its
    field's description."""
    text = ALL_PY.read_text() if text is None else text
    comments = _comments(text)
    headings = [
        (line, m.group(1))
        for line, (column, comment) in comments.items()
        if column == 0 and (m := HEADING.match(comment))
    ]
    schema = stages()
    problems: list[str] = []
    seen: dict[str, int] = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        else:
            continue
        for name in (t.id for t in targets if isinstance(t, ast.Name) and not t.id.startswith("_")):
            where = f"group_data/all.py:{node.lineno}: {name}"
            if name not in schema:
                problems.append(f"{where} is not a field of vllm_rig/settings.py")
                continue
            if name in seen:
                problems.append(f"{where} is set again (first on line {seen[name]})")
                continue
            seen[name] = node.lineno
            stage = _stage_of(node.lineno, headings)
            if stage != schema[name]:
                problems.append(f"{where} stands under the heading of stage {stage!r}; its stage is {schema[name]!r}")
            want = f"# {description(name)}"
            if comments.get(node.lineno, (0, ""))[1] != want:
                problems.append(f"{where}: its comment must be its description in vllm_rig/settings.py: {want!r}")
    problems += [f"group_data/all.py: {name} is missing" for name in schema if name not in seen]
    order = [name for name in schema if name in seen]
    placed = sorted(seen, key=seen.__getitem__)
    for want, got in zip(order, placed, strict=True):
        if want != got:
            problems.append(
                f"group_data/all.py:{seen[got]}: {got} stands where vllm_rig/settings.py has {want}: "
                "keep the schema's order"
            )
            break
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vllm_rig.settings_doc", description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="rewrite the table in docs/settings.md")
    action.add_argument("--check", action="store_true", help="exit 1 when docs/settings.md or group_data/all.py differ")
    args = parser.parse_args(argv)
    if args.write:
        README.write_text(readme_with_table(README.read_text()))
        return 0
    if args.check:
        problems = readme_problems() + all_py_problems()
        for line in problems:
            print(line, file=sys.stderr)
        return 1 if problems else 0
    sys.stdout.write(table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
