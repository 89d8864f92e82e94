"""Every option that writes a file behaves like a Unix tool's: ``-`` is standard output, a symlink is written
through (never replaced by a file), a FIFO, a device or a directory is refused before any work (exit 2, one
line), and ``audit -o FILE`` still shows the verdict on the terminal. Special files are made in a temporary
folder; ``/dev/null`` is reached only through a symlink to it."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, tito

MODEL = "qwen2.5-7b-instruct"  # bundled: no Hub, no network


def one_line_exit_2(done: subprocess.CompletedProcess[str], *words: str) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in done.stderr, done.stderr
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


@pytest.fixture
def specials(tmp_path: Path) -> dict[str, Path]:
    """A FIFO, a directory, a symlink to /dev/null and a dangling-free symlink to a regular file."""
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    (tmp_path / "adir.json").mkdir()
    (tmp_path / "null.json").symlink_to("/dev/null")
    return {"fifo": fifo, "dir": tmp_path / "adir.json", "device": tmp_path / "null.json"}


def _refusals(tmp_path: Path, target: Path) -> list[tuple[list[str], str]]:
    """Each command's file-writing option, pointed at ``target`` (checked before any work is done)."""
    log = tmp_path / "log.jsonl"
    log.write_text("{}\n")
    return [
        (["audit", MODEL, "-o", str(target)], "--output"),
        (["table", MODEL, "-o", str(target)], "--output"),
        (["fix", MODEL, "-o", str(target)], "--output"),
        (["scan", str(tmp_path), "--json", str(target)], "--json"),
        (["scan", str(tmp_path), "--markdown", str(target)], "--markdown"),
        (["scan", str(tmp_path), "--html", str(target)], "--html"),
        (["replay", str(log), "--model", MODEL, "-o", str(target)], "--output"),
    ]


@pytest.mark.parametrize(("kind", "words"), [("fifo", "FIFO"), ("device", "device"), ("dir", "directory")])
def test_a_fifo_a_device_or_a_directory_is_refused_by_every_writing_option(tmp_path, specials, kind, words) -> None:
    target = specials[kind]
    for argv, option in _refusals(tmp_path, target):
        line = one_line_exit_2(tito(*argv, cwd=tmp_path), option, words)
        assert str(target) in line
    assert stat.S_ISFIFO(specials["fifo"].stat().st_mode)  # never replaced by a file
    assert specials["device"].is_symlink() and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert specials["dir"].is_dir()


def test_rl_folders_are_refused_when_they_are_not_folders(tmp_path, specials) -> None:
    for option in ("--out", "--save-policy"):
        one_line_exit_2(tito("rl", MODEL, option, str(specials["fifo"]), cwd=tmp_path), option, "FIFO")
        one_line_exit_2(tito("rl", MODEL, option, "-", cwd=tmp_path), option, "folder")
    assert stat.S_ISFIFO(specials["fifo"].stat().st_mode)


def test_rl_folders_are_refused_where_a_file_is_or_no_folder_can_be_made(tmp_path) -> None:
    """Red team 49: a regular file, or a place where no folder can be made (``/proc``), ran the whole loop and then
    failed with a traceback and exit 1 (the ``corrupted`` verdict's code). Checked before any work now."""
    existing = tmp_path / "a_file"
    existing.write_text("x")
    for option in ("--out", "--save-policy"):
        one_line_exit_2(tito("rl", MODEL, option, str(existing), cwd=tmp_path), option, "is a file, not a folder")
        one_line_exit_2(tito("rl", MODEL, option, "/proc/tito-audit-test", cwd=tmp_path), option, "cannot be made")
    assert existing.read_text() == "x"


def test_a_missing_directory_is_said_in_words(tmp_path) -> None:
    line = one_line_exit_2(tito("audit", MODEL, "-o", str(tmp_path / "out" / "r.json"), cwd=tmp_path), "--output")
    assert line.endswith(f"r.json: the directory {tmp_path / 'out'} does not exist (create it first)"), line


@pytest.fixture(scope="module")
def audited_to_stdout(tmp_path_factory) -> tuple[subprocess.CompletedProcess[str], Path]:
    cwd = tmp_path_factory.mktemp("stdout")
    return tito("audit", MODEL, "--format", "json", "-o", "-", cwd=cwd), cwd


def test_dash_is_standard_output(audited_to_stdout) -> None:
    done, cwd = audited_to_stdout
    assert done.returncode in (0, 1), done.stderr
    assert json.loads(done.stdout)["models"][0]["model"] == MODEL
    assert not (cwd / "-").exists() and "wrote" not in done.stderr


def test_a_symlink_is_written_through_and_stays_a_link(tmp_path) -> None:
    real = tmp_path / "reports" / "real.json"
    real.parent.mkdir()
    real.write_text("the last report")
    link = tmp_path / "latest.json"
    link.symlink_to(real)
    done = tito("audit", MODEL, "-o", str(link), cwd=tmp_path)
    assert done.returncode in (0, 1), done.stderr
    assert link.is_symlink() and link.resolve() == real
    assert json.loads(real.read_text())["models"][0]["model"] == MODEL
    assert sorted(p.name for p in real.parent.iterdir()) == ["real.json"]  # no temporary file left beside it


def test_audit_to_a_file_still_shows_the_verdict(tmp_path) -> None:
    done = tito("audit", MODEL, "-o", str(tmp_path / "r.json"), cwd=tmp_path)
    quiet = tito("audit", MODEL, "-q", cwd=tmp_path)
    assert done.returncode == quiet.returncode, done.stderr
    verdict = next(line for line in quiet.stdout.splitlines() if line.startswith(MODEL))
    assert verdict in done.stdout.splitlines()
    assert f"wrote {tmp_path / 'r.json'}" in done.stderr


def test_scan_summaries_and_the_other_writers_take_dash(tmp_path) -> None:
    template = tmp_path / "t.jinja"
    template.write_text(
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    done = tito("scan", str(template), "--tokenizer", MODEL, "--json", "-", "--no-progress", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["templates"] == 1  # the table went to stderr, stdout is the JSON alone
    assert not (tmp_path / "-").exists()
    fixed = tito("fix", "qwen3-0.6b", "-o", "-", cwd=tmp_path)  # a patch it offers (it changes deployed prompts)
    assert fixed.returncode == 1 and not (tmp_path / "-").exists(), fixed.stderr
    assert fixed.stdout.startswith("{%-") and "patch changes deployed prompts" in fixed.stderr  # the report: stderr
    assert "<|im_start|>" in fixed.stdout and "Wrote" not in fixed.stderr
    one_line_exit_2(tito("fix", MODEL, "-o", "-", "--format", "json", cwd=tmp_path), "-o -", "--format json")


def _audit(tmp_path: Path, *extra: str, **streams: object) -> subprocess.Popen[bytes]:
    """``tito-audit audit qwen2.5-7b-instruct --search 0 EXTRA`` started in a fresh interpreter with ``streams``."""
    argv = [sys.executable, "-m", "tito_audit", "audit", "qwen2.5-7b-instruct", "--search", "0", *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(argv, env=env, cwd=tmp_path, stderr=subprocess.PIPE, **streams)  # type: ignore[call-overload]


def test_a_reader_that_closes_stdout_ends_the_run_as_a_sigpipe_would(tmp_path: Path) -> None:
    """`tito-audit ... | head -1`: an outside tester got exit 1 (the code of findings) on a SAFE model, which a
    pipeline with pipefail reads as a gate failure. The run ends quietly with 141 (128 + SIGPIPE)."""
    proc = _audit(tmp_path, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.read(1)
    proc.stdout.close()  # as `head -c1` does
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 141, err
    assert b"Traceback" not in err and err == b""


def test_a_full_stdout_is_one_line_exit_2(tmp_path: Path) -> None:
    """`> /dev/full` (a disk that is full): one line naming the cause, exit 2, never a traceback."""
    with open("/dev/full", "w") as full:
        proc = _audit(tmp_path, "-q", stdout=full)
        _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, err
    assert err.decode().strip().splitlines() == ["error: cannot write the output: No space left on device"]
