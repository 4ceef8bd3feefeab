"""The keyed stamp: its shell run for real against temporary files (the write after a success only, the one
command that reads every stamp), and `stamped` planned on pyinfra's @fake host (one read shared by the
operations of a run, read again after a write)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.unit.fake_host import plan as _plan
from vllm_rig import paths
from vllm_rig.core.stamp import Stamp, Stamps, parse_stamps, stamped, with_key_of, write_key


def _sh(command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=False)


def _read(*files: Path) -> dict[str, Stamp]:
    out = _sh(Stamps().command(files=tuple(str(f) for f in files)))
    assert out.returncode == 0, out.stderr  # a missing stamp is no error (a non-zero fact fails the host)
    return Stamps().process(out.stdout.splitlines())


def test_the_key_is_written_only_after_the_command_succeeded(tmp_path: Path) -> None:
    path = tmp_path / "state" / "x.stamp"
    assert _sh(f"false && {write_key(str(path), 'k1')}").returncode != 0
    assert not path.exists()  # the failed command left no key: the next run repeats it
    assert _sh(f"true && {write_key(str(path), 'k1')}").returncode == 0
    assert path.read_text() == "k1\n"
    assert _sh(f"false && {write_key(str(path), 'k2')}").returncode != 0
    assert path.read_text() == "k1\n"  # the old key stays


def test_one_command_reads_every_stamp_with_its_time(tmp_path: Path) -> None:
    a, b, touched, missing = (tmp_path / n for n in ("a", "b", "touched", "missing"))
    _sh(f"{write_key(str(a), 'kernel=6.8.0-49-generic driver=580.159.03')} && {write_key(str(b), 'x:y/z')}")
    touched.touch()  # a stamp from before keys (the switch stamp used to be touched)
    found = _read(a, b, touched, missing)
    assert found[str(a)].key == "kernel=6.8.0-49-generic driver=580.159.03"
    assert found[str(b)].key == "x:y/z"
    assert found[str(touched)].key == ""
    assert str(missing) not in found
    assert found[str(a)].mtime == int(a.stat().st_mtime)


def test_a_key_is_one_line() -> None:
    with pytest.raises(ValueError, match="one line"):
        write_key("/s", "a\nb")
    assert parse_stamps(["/s\t12\tk\twith tab"]) == {"/s": Stamp(key="k\twith tab", mtime=12)}


def _stamps(**stamps: tuple[int, str]) -> dict[str, list[str]]:
    return {"echo @@stamps": ["@@stamps", *(f"{path}\t{mtime}\t{key}" for path, (mtime, key) in stamps.items())]}


S = paths.INITRAMFS_STAMP


def test_stamped_runs_once_per_key() -> None:
    assert _plan(_stamps(**{S: (1, "k1")}), stamped, command="work", stamp=S, key="k1")[0] is False
    changed, commands = _plan(_stamps(**{S: (1, "k0")}), stamped, command="work", stamp=S, key="k1")
    assert changed and commands == [f"work && mkdir -p {paths.STATE_DIR} && printf '%s\\n' k1 > {S}", _FORGET]
    assert _plan({}, stamped, command="work", stamp=S, key="k1")[0] is True  # no stamp yet


_FORGET = "FunctionCommand(_forget, (), {})"


def test_a_streamed_command_runs_before_its_stamp_is_written() -> None:
    _, commands = _plan({}, stamped, command="probe", stamp=S, key="k", streamed=True)
    assert commands[0].startswith("FunctionCommand(_run_streamed, ('probe',)")
    assert commands[1] == f"mkdir -p {paths.STATE_DIR} && printf '%s\\n' k > {S}" and commands[2] == _FORGET


def test_a_key_made_with_another_stamp_follows_it() -> None:
    key = with_key_of("fp", paths.SWITCHED_STAMP)
    proven = _stamps(**{S: (1, "fp:/opt/vllm-rig/runtimes/a"), paths.SWITCHED_STAMP: (1, "/opt/vllm-rig/runtimes/a")})
    assert _plan(proven, stamped, command="probe", stamp=S, key=key)[0] is False
    switched = _stamps(**{S: (1, "fp:/opt/vllm-rig/runtimes/a"), paths.SWITCHED_STAMP: (2, "/opt/vllm-rig/runtimes/b")})
    changed, commands = _plan(switched, stamped, command="probe", stamp=S, key=key)
    assert changed and "fp:/opt/vllm-rig/runtimes/b" in commands[0]


def _run(responses: dict[str, Any], ops: list[dict[str, Any]], forget_after: int | None = None) -> int:
    """Plan `ops` (stamped's keyword arguments) in one run on a @fake host; how often the stamps were read.
    `forget_after`: run the forget step of that operation's commands, as a successful write does."""
    from pyinfra.api import Config, Inventory, State
    from pyinfra.api.connect import connect_all
    from pyinfra.api.operation import add_op
    from pyinfra.context import ctx_host, ctx_state

    inventory = Inventory((["@fake/box"], {"fake_responses": responses, "fake_delay": 0, "fake_delay_jitter": 0}))
    state = State(inventory, Config())
    connect_all(state)
    box = inventory.get_host("@fake/box")
    reads = 0
    real_process = Stamps.process

    def counted(self: Stamps, output: list[str]) -> dict[str, Stamp]:
        nonlocal reads
        reads += 1
        return real_process(self, output)

    Stamps.process = counted  # type: ignore[method-assign]
    try:
        for i, kwargs in enumerate(ops):
            meta = add_op(state, stamped, **kwargs)[box]
            if i == forget_after:
                with ctx_state.use(state), ctx_host.use(box):
                    for command in state.ops[box][meta._hash].command_generator():
                        if "_forget" in str(command):
                            command.execute(state, box, {})
    finally:
        Stamps.process = real_process  # type: ignore[method-assign]
    return reads


def test_the_stamps_are_read_once_per_run_and_again_after_a_write() -> None:
    responses = _stamps(**{S: (1, "k"), paths.FLASHQLA_STAMP: (1, "r")})
    ops = [
        {"name": "a", "command": "a", "stamp": S, "key": "k"},
        {"name": "b", "command": "b", "stamp": paths.FLASHQLA_STAMP, "key": "r"},
        {"name": "c", "command": "c", "stamp": S, "key": "k"},
    ]
    assert _run(responses, ops) == 1
    ops[0]["key"] = "new"  # the first changes and writes its stamp: the next one reads the host again
    assert _run(responses, ops, forget_after=0) == 2


def test_every_stamp_is_listed_where_the_one_read_finds_it() -> None:
    found = {getattr(paths, n) for n in dir(paths) if n.endswith(("_STAMP", "_PROVEN")) or n == "HOST_FINGERPRINT"}
    assert found - {paths.APT_LISTS_STAMP} == set(paths.STAMPS)
