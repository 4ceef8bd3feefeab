"""hf_verify_endpoint: the model's file hashes come from hf_endpoint (by default the first setup's mirror); a
second endpoint, when it can be asked, must list the same hashes for the same commit, else nothing downloads."""

from __future__ import annotations

import pytest

from tests.unit.groupdata import profile_data
from vllm_rig.host.model_fetch import EXIT_CORRUPT, EXIT_UNREACHABLE, FetchError, Plan, RemoteFile, second_opinion
from vllm_rig.stages.model.operations import FetchSpec
from vllm_rig.validation import load_settings

COMMIT = "a" * 40
FILES = (RemoteFile("model.safetensors", 10, "1" * 64, "b1"), RemoteFile("config.json", 2, None, "c" * 40))
PLAN = Plan("o/m", "main", COMMIT, "https://mirror.example", FILES)


def _other(files: tuple[RemoteFile, ...]):
    def resolver(repo: str, revision: str, endpoint: str, send_token: bool = True) -> Plan:
        assert (repo, revision, send_token) == ("o/m", COMMIT, False)  # the same commit; the token stays home
        return Plan(repo, revision, COMMIT, endpoint, files)

    return resolver


def test_the_same_hashes_are_said_and_the_fetch_goes_on() -> None:
    line = second_opinion(PLAN, "https://second.example", _other(FILES))
    assert line == f"https://second.example lists the same hashes for all 2 files of commit {COMMIT[:12]}"


@pytest.mark.parametrize(
    "theirs",
    [
        (RemoteFile("model.safetensors", 10, "2" * 64, "b1"), FILES[1]),
        (FILES[0], RemoteFile("config.json", 2, None, "d" * 40)),
        (FILES[1],),
    ],
    ids=["lfs sha256", "git blob", "missing"],
)
def test_other_hashes_stop_the_fetch_naming_a_file(theirs: tuple[RemoteFile, ...]) -> None:
    with pytest.raises(FetchError) as err:
        second_opinion(PLAN, "https://second.example", _other(theirs))
    assert err.value.code == EXIT_CORRUPT
    assert str(err.value).startswith(
        f"o/m@{COMMIT[:12]}: https://mirror.example and https://second.example list other hashes for 1"
    )
    assert "not downloading" in str(err.value)


def test_a_second_endpoint_that_cannot_be_asked_is_said_and_the_fetch_goes_on() -> None:
    def down(*args, **kwargs) -> Plan:
        raise FetchError(EXIT_UNREACHABLE, "o/m: second.example did not answer")

    assert second_opinion(PLAN, "https://second.example", down) == (
        "https://second.example could not be asked (o/m: second.example did not answer); the files are checked "
        "against https://mirror.example's hashes only"
    )


def test_the_setting_reaches_the_fetch_command() -> None:
    assert "--verify-endpoint" not in FetchSpec.of(load_settings(profile_data())).fetch_argv()
    s = load_settings({**profile_data(), "hf_verify_endpoint": "https://second.example"})
    argv = FetchSpec.of(s).fetch_argv()
    assert argv[argv.index("--verify-endpoint") + 1] == "https://second.example"
    with pytest.raises(Exception, match="hf_verify_endpoint"):
        load_settings({**profile_data(), "hf_verify_endpoint": "second.example"})
