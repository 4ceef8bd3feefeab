"""The layers table of docs/architecture.md, enforced: a module imports only from its own layer or the ones below it.
Every import counts, also one inside a function or under TYPE_CHECKING: a late import is still a dependency."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Top to bottom, as docs/architecture.md's table lists them: (layer, module prefixes).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("entry", ("deploy", "inventory", "config", "tasks", "vllm_rig.cli")),
    (
        "run",
        (
            "vllm_rig.context",
            "vllm_rig.validation",
            "vllm_rig.inventory_file",
            "vllm_rig.reach",
            "vllm_rig.settings_doc",
        ),
    ),
    ("stages", ("vllm_rig.stages",)),
    ("generic", ("vllm_rig.core",)),
    ("paths", ("vllm_rig.paths",)),
    ("settings", ("vllm_rig.settings", "vllm_rig.setting_types", "vllm_rig.host_settings")),
    ("known", ("vllm_rig.known",)),
    ("host", ("vllm_rig.host",)),
]


def layer_of(module: str) -> int | None:
    for index, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return index
    return None


def shown(path: Path) -> str:
    """The path from the repository's top; a probe made under a test's tmp_path is shown as if it were there
    (the probes never write into the repository, where another test running beside them would see them)."""
    parts = path.parts
    if "vllm_rig" in parts:
        return "/".join(parts[len(parts) - 1 - parts[::-1].index("vllm_rig") :])
    return path.relative_to(REPO).as_posix()


def module_name(path: Path) -> str:
    parts = shown(path).removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    return _imported(path, path.read_text())


@cache  # the checks below read every file; each is parsed once per test process
def _imported(path: Path, text: str) -> set[str]:
    """Every vllm_rig module (or package) a file imports, relative imports resolved."""
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}  # `from vllm_rig import paths`
    return {name for name in found if name == "vllm_rig" or name.startswith("vllm_rig.")}


def project_files() -> list[Path]:
    files = [REPO / name for name in ("deploy.py", "inventory.py", "config.py")]
    package = [p for p in sorted((REPO / "vllm_rig").rglob("*.py")) if p != REPO / "vllm_rig" / "__init__.py"]
    return files + sorted((REPO / "tasks").glob("*.py")) + package


def violations(files: list[Path]) -> list[str]:
    found = []
    for path in files:
        mine = layer_of(module_name(path))
        assert mine is not None, f"{shown(path)} is in no layer of docs/architecture.md's table"
        for name in sorted(imported(path)):
            theirs = layer_of(name)
            if theirs is not None and theirs < mine:
                found.append(f"{shown(path)} ({LAYERS[mine][0]}) imports {name} ({LAYERS[theirs][0]})")
    return found


def probe(tmp_path: Path, name: str, text: str) -> Path:
    """A module as if it were vllm_rig/known/<name>.py, made under tmp_path."""
    path = tmp_path / "vllm_rig" / "known" / f"{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_no_module_imports_a_layer_above_its_own() -> None:
    assert violations(project_files()) == []


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    # The rule is real: a settings-floor module importing a stage is reported.
    bad = probe(tmp_path, "_layers_probe", "from vllm_rig.stages.service.command import settings_args\n")
    found = violations([*project_files(), bad])
    assert any(line.startswith("vllm_rig/known/_layers_probe.py (known) imports") for line in found), found


def test_host_programs_import_only_their_own_package() -> None:
    for path in sorted((REPO / "vllm_rig" / "host").rglob("*.py")):
        outside = {name for name in imported(path) if not name.startswith("vllm_rig.host")}
        assert not outside, f"{path.name} imports {outside}: the host zip carries vllm_rig/host only"


def test_layers_table_matches_the_readme() -> None:
    readme = (REPO / "docs" / "architecture.md").read_text()
    for layer, _ in LAYERS:
        assert f"| {layer} |" in readme, f"docs/architecture.md's layers table has no row for {layer}"


def test_top_level_is_the_users_layout() -> None:
    card = {"deploy.py", "inventory", "tasks", "files", "templates", "group_data", "tests", "README.md"}
    assert card <= {p.name for p in REPO.iterdir()}


def test_every_template_and_shipped_file_is_at_the_top_by_stage() -> None:
    inside = [p for p in (REPO / "vllm_rig").rglob("*") if p.suffix in (".j2", ".sh")]
    assert inside == [], "templates go in templates/<stage>/, shipped files in files/<stage>/"
    stages = {p.name for p in (REPO / "vllm_rig" / "stages").iterdir() if p.is_dir() and p.name != "__pycache__"}
    code = "\n".join(p.read_text() for p in (REPO / "vllm_rig").rglob("*.py"))
    for top in ("templates", "files"):
        for path in sorted((REPO / top).rglob("*")):
            if path.is_file():
                stage, name = path.relative_to(REPO / top).parts[0], path.relative_to(REPO / top).as_posix()
                assert stage in stages, f"{top}/{name}: {stage} is not a stage"
                assert f'"{name}"' in code, f"{top}/{name} is used by no stage (found through core/files.py)"


def import_cycles(files: list[Path]) -> list[list[str]]:
    """Groups of modules that import each other, directly or round a ring (Tarjan's strongly connected components)."""
    modules = {module_name(p): p for p in files}
    graph = {m: sorted(n for n in imported(p) if n in modules and n != m) for m, p in modules.items()}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        order[v] = low[v] = len(order)
        stack.append(v)
        for w in graph[v]:
            if w not in order:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], order[w])
        if low[v] == order[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for v in graph:
        if v not in order:
            visit(v)
    return cycles


def test_no_modules_import_each_other() -> None:
    # A circle means neither module can be read, tested or replaced alone; a late import hides one, it counts.
    assert import_cycles(project_files()) == []


def test_the_cycle_check_sees_a_ring(tmp_path: Path) -> None:
    names = [f"_ring_{n}" for n in "abc"]
    probes = [
        probe(tmp_path, here, f"def f():\n    from vllm_rig.known import {there}\n")
        for here, there in zip(names, names[1:] + names[:1], strict=True)
    ]
    cycles = import_cycles([*project_files(), *probes])
    assert names in [[m.rsplit(".", 1)[1] for m in c] for c in cycles], cycles


# A dispatch on the runtime kind: its settings compared, or a kind-named value compared with a kind's name.
# Settings.runtime is the one place that reads them, every other module asks vllm_rig/stages/runtime/kinds/ (the
# control side) or settings.KIND_RULES (the settings' own rules); host data read before any Settings exists says so.
KIND_NAMES = '"(fork|upstream|upstream-wheel|upstream-compile|wheel|compile)"'
KIND_DISPATCH = re.compile(
    r"\b(runtime_kind|upstream_build)\b[\"')\]]*\s*(==|!=|\bin\b|\bnot in\b)"
    rf"|\b(\w*kind|runtime)\s*(==|!=|\bin\b|\bnot in\b)\s*[(\[{{]?\s*{KIND_NAMES}"
)
BEFORE_VALIDATION = "# Before validation:"  # a function's comment: no Settings to ask yet, the raw kind is read


def kind_dispatches(files: list[Path]) -> dict[str, str]:
    """Each dispatch ("path:line: text") and the function that says it reads host data before validation ("" if
    none does)."""
    found = {}
    for path in files:
        text = path.read_text()
        where = shown(path)
        lines = text.splitlines()
        raw = [
            (f.lineno, f.end_lineno or f.lineno, f"{where}:{f.name}")
            for f in (ast.walk(ast.parse(text)) if BEFORE_VALIDATION in text else ())
            if isinstance(f, ast.FunctionDef)
            and any(BEFORE_VALIDATION in x for x in lines[f.lineno - 1 : f.end_lineno])
        ]
        for number, line in enumerate(lines, 1):
            if KIND_DISPATCH.search(line):
                said = [name for first, last, name in raw if first <= number <= last]
                found[f"{where}:{number}: {line.strip()}"] = said[0] if said else ""
    return found


def test_the_runtime_kind_is_picked_in_one_place() -> None:
    found = kind_dispatches(project_files())
    picked = [line for line, raw in found.items() if not raw]
    assert len(picked) == 1 and picked[0].startswith("vllm_rig/settings.py:"), picked
    assert '"fork" if self.runtime_kind == "fork" else f"upstream-{self.upstream_build}"' in picked[0]
    # Host data before any Settings: the kind's defaults, a field check's server interface, bin/locks' profiles.
    raw = {
        "vllm_rig/settings.py:kind_defaults",
        "vllm_rig/settings.py:_server_interface",
        "vllm_rig/cli/locks.py:profile",
    }
    assert set(found.values()) - {""} == raw


def test_the_dispatch_check_sees_one(tmp_path: Path) -> None:
    made = probe(
        tmp_path,
        "_kind_probe",
        'def f(s):\n    return s.upstream_build != "wheel"\n\n\n'
        'def g(kind):\n    return kind == "fork"\n\n\n'
        'def h(data):\n    # Before validation: a probe\n    return data.get("runtime_kind") in ("fork",)\n',
    )
    found = {line.split(": ", 1)[1]: raw for line, raw in kind_dispatches([made]).items()}
    assert found == {
        'return s.upstream_build != "wheel"': "",
        'return kind == "fork"': "",
        'return data.get("runtime_kind") in ("fork",)': "vllm_rig/known/_kind_probe.py:h",
    }


def test_every_kind_the_settings_name_has_a_module_and_rules() -> None:
    from types import SimpleNamespace

    from vllm_rig.settings import KIND_RULES, Settings
    from vllm_rig.stages.runtime.kinds import KINDS

    host = (REPO / "vllm_rig" / "host" / "build_runtime.py").read_text()
    assert set(KINDS) == set(KIND_RULES)
    picked = {
        Settings.runtime.fget(SimpleNamespace(runtime_kind=kind, upstream_build=build))  # type: ignore[attr-defined]
        for kind in ("fork", "upstream")
        for build in ("wheel", "compile")
    }
    assert picked == set(KINDS)
    for name in KINDS:
        assert f'"{name}":' in host, f"vllm_rig/host/build_runtime.py's KINDS has no {name}"
