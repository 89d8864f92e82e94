"""Option values are checked as a Unix tool checks them: every numeric option refuses NaN, infinities, values out
of its range and values past what it can mean, in one line that names the option and its range (exit 2);
options that contradict each other are refused (exit 2); ``-h`` is ``--help`` on every command. All of it
happens before any work: the model named is bundled, and nothing is audited."""

from __future__ import annotations

import pytest

from tests.conftest import invoke, tito
from tito_audit.cli import COMMANDS

MODEL = "qwen3-0.6b"


def refused(argv: list[str], *words: str) -> str:
    done = invoke(*argv)
    lines = done.stderr.strip().splitlines()
    assert done.exit_code == 2, (argv, done.exit_code, done.output)
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in done.output, done.output
    assert all(w in lines[0] for w in words), (argv, lines[0])
    return lines[0]


NUMBERS = [
    (["scan", "."], "--deadline", ["inf", "nan", "-1", "0", "1e400", "1e9"]),
    (["scan", "."], "--render-timeout", ["nan", "inf", "0", "-2"]),
    (["scan", "."], "--memory-mb", ["99999999999999", "-1"]),
    (["scan", "."], "--limit", ["-5", "0"]),
    (["scan", "."], "--workers", ["-1", "100000"]),
    (["audit", MODEL], "--jobs", ["0", "-3", "100000000000000000000"]),
    (["audit", MODEL], "--min-coverage", ["-1", "10000000000000"]),
    (["replay", "log.jsonl", "-m", MODEL], "--max-record-mb", ["nan", "inf", "0", "1e300"]),
    (["replay", "log.jsonl", "-m", MODEL], "--workers", ["0", "99999"]),
    (["replay", "log.jsonl", "-m", MODEL], "--max-episodes", ["-1"]),
    (["replay", "log.jsonl", "-m", MODEL], "--numeric-drift-threshold", ["nan", "-0.5", "inf"]),
    (["replay", "log.jsonl", "-m", MODEL], "--ray-memory", ["nan", "0", "-8"]),
    (["rl", MODEL], "--steps", ["0", "-1", "10000000"]),
    (["rl", MODEL], "--lr", ["nan", "inf", "0", "-1e-3"]),
    (["rl", MODEL], "--warmup-lr", ["nan", "0"]),
    (["rl", MODEL], "--noncanonical-rate", ["nan", "1.5", "-0.1"]),
    (["rl", MODEL], "--seed", ["-1", "99999999999999999999"]),
    (["rl", MODEL], "--group-size", ["1", "0"]),
    (["rl", MODEL], "--groups", ["0"]),
    (["rl", MODEL], "--max-new-tokens", ["0"]),
    (["rl", MODEL], "--hidden", ["0"]),
    (["rl", MODEL], "--layers", ["-2"]),
    (["rl", MODEL], "--warmup", ["-1"]),
]


@pytest.mark.parametrize(("argv", "option", "values"), NUMBERS, ids=[f"{a[0]} {o}" for a, o, _ in NUMBERS])
def test_a_numeric_option_names_itself_and_its_range(argv, option, values) -> None:
    for value in values:
        line = refused([*argv, option, value], f"'{option}'", "out of range", "give a number")
        assert "," not in line.split(": give a number")[0].replace(f"'{option}'", "")  # one option named, not five


def test_scan_workers_zero_is_in_range_and_said_so() -> None:
    """0 runs in this process (no hard limits): it is in the range the message gives, not 'must be positive'."""
    line = refused(["scan", ".", "--workers", "-1"], "'--workers'", "from 0 to")
    assert "positive" not in line


CONTRADICTIONS = [
    (["replay", "log.jsonl", "-m", MODEL, "--only-tito", "--what-if"], ("--only-tito", "--what-if")),
    (["replay", "log.jsonl", "-m", MODEL, "--only-tito", "--drift"], ("--only-tito", "--drift")),
    (["replay", "log.jsonl", "-m", MODEL, "--ray-address", "auto"], ("--engine local", "--ray-address")),
    (["replay", "log.jsonl", "-m", MODEL, "--engine", "ray", "--workers", "4"], ("--engine ray", "--workers")),
    (["replay", "log.jsonl", "-m", MODEL, "--device", "cpu"], ("--device", "needs --weights")),
    (["replay", "log.jsonl", "-m", MODEL, "--no-gradient"], ("--gradient", "needs --weights")),
    (["scan", ".", "--tokenizer", MODEL, "--candidate", "gpt-oss-20b"], ("--candidate", "--tokenizer auto")),
    (["scan", ".", "--tokenizer", MODEL, "--no-synthesize"], ("--synthesize", "--tokenizer auto")),
    (["scan", ".", "--workers", "0", "--deadline", "5"], ("--workers 0", "--deadline", "cannot be enforced")),
    (["scan", ".", "--workers", "0", "--memory-mb", "100"], ("--workers 0", "--memory-mb")),
    (["scan", ".", "--json", "-", "--html", "-"], ("--json", "--html", "standard output")),
    (["rl", MODEL, "--weights", "org/policy", "--hidden", "8"], ("--weights", "--hidden")),
    (["fix", MODEL, "-o", "-", "--format", "json"], ("-o -", "--format json")),
]


@pytest.mark.parametrize(("argv", "words"), CONTRADICTIONS, ids=[" ".join(a[:1] + a[3:]) for a, _ in CONTRADICTIONS])
def test_contradictory_options_are_refused(tmp_path, monkeypatch, argv, words) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "log.jsonl").write_text("{}\n")
    refused(argv, *words)


def test_what_an_option_can_still_say_alone_is_accepted(tmp_path, monkeypatch) -> None:
    """The defaults of the contradicted options are no contradiction: --only-tito alone, scan with a tokenizer."""
    monkeypatch.chdir(tmp_path)
    done = invoke("replay", str(tmp_path / "none.jsonl"), "-m", MODEL, "--only-tito")
    assert done.exit_code == 2 and "no such log file" in done.stderr, done.output  # got past the options


@pytest.mark.parametrize("command", COMMANDS)
def test_dash_h_is_help_on_every_command(command) -> None:
    short, long = tito(command, "-h"), tito(command, "--help")
    assert short.returncode == 0 and short.stdout == long.stdout and "Usage: tito-audit" in short.stdout


def test_dash_h_is_help_for_the_tool_and_the_short_form() -> None:
    assert tito("-h").stdout == tito("--help").stdout
    assert tito(MODEL, "-h").stdout == tito("audit", "--help").stdout
