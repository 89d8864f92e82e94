"""A typo names nothing: the close subcommand, bundled name or cached repo id is suggested, and nothing is audited
under the typo's name."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import needs_hub, tito
from tito_audit.cli import CommandTypo, _with_default_command
from tito_audit.sources.suggest import close_names

cli = tito


def test_a_misspelt_command_is_suggested_and_nothing_is_audited() -> None:
    done = cli("audti", "qwen3-0.6b")
    assert done.returncode == 2 and done.stdout == ""  # qwen3-0.6b was not audited
    assert done.stderr.strip() == (
        "error: no command 'audti': did you mean `tito-audit audit`? (a model named 'audti': `tito-audit audit audti`)"
    )
    for typo, command in (("tabel", "table"), ("scna", "scan"), ("rpelay", "replay")):
        with pytest.raises(CommandTypo, match=f"tito-audit {command}"):
            _with_default_command([typo, "x"])


def test_a_model_is_never_taken_for_a_typo(tmp_path: Path, monkeypatch) -> None:
    assert _with_default_command(["qwen3-0.6b"]) == ["audit", "qwen3-0.6b"]  # bundled
    assert _with_default_command(["org/tabel"]) == ["audit", "org/tabel"]  # a repo id
    (tmp_path / "tabel").mkdir()
    monkeypatch.chdir(tmp_path)
    assert _with_default_command(["tabel"]) == ["audit", "tabel"]  # a local folder


def test_an_unknown_bundled_name_gets_the_close_ones() -> None:
    done = cli("audit", "qwen3-0.6", "--quiet", "--offline")
    assert done.returncode == 2
    assert "(did you mean qwen3-0.6b" in done.stderr and done.stderr.count("\n") == 1


@needs_hub
def test_a_repo_id_in_the_wrong_case_gets_the_cached_one() -> None:
    assert close_names("qwen/qwen3-0.6b")[0] == "Qwen/Qwen3-0.6B"
    done = cli("audit", "qwen/qwen3-0.6b", "--quiet", "--offline")
    assert done.returncode == 2 and "did you mean Qwen/Qwen3-0.6B" in done.stderr


def test_nothing_close_is_no_suggestion() -> None:
    assert close_names("zzzz-unrelated-name") == []
