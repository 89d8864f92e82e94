"""Messages that used to mislead, each now saying what is wrong with what the user gave (one line, exit 2)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import invoke

MODEL = "qwen3-0.6b"


def line_of(*argv: str) -> str:
    done = invoke(*argv)
    lines = done.stderr.strip().splitlines()
    assert done.exit_code == 2 and len(lines) == 1 and "Traceback" not in done.output, done.output
    return lines[0]


def test_weights_in_a_folder_that_does_not_exist_are_named_as_a_folder(tmp_path: Path) -> None:
    """Not the Hub's "Repo id must be in the form ...": the path is a folder the user meant."""
    missing = str(tmp_path / "nonexistent" / "dir")
    for argv in (["rl", MODEL, "--weights", missing], ["rl", MODEL, "--ref", missing, "--warmup", "1"]):
        line = line_of(*argv)
        assert line == f"error: {missing}: cannot load weights: no such folder ({argv[2]})", line
    log = tmp_path / "log.jsonl"
    log.write_text("{}\n")
    line = line_of("replay", str(log), "-m", MODEL, "--weights", "/nonexistent/dir")
    assert line == "error: /nonexistent/dir: cannot load weights: no such folder (--weights)"
    (tmp_path / "weights.bin").write_bytes(b"")
    assert "is a file, not a folder" in line_of("rl", MODEL, "--weights", str(tmp_path / "weights.bin"))


def test_a_directory_given_as_a_log_is_called_a_directory(tmp_path: Path) -> None:
    line = line_of("replay", str(tmp_path), "-m", MODEL)
    pattern = f"'{tmp_path}/*.jsonl'"
    assert line == f"error: {tmp_path}: is a directory, not a log file (give its files, or a pattern: {pattern})"
    assert "no such log file" in line_of("replay", str(tmp_path / "missing.jsonl"), "-m", MODEL)
