"""Regenerate the real outputs shown in the README and the docs, or check that they are current.

    python scripts/doc_examples.py README.md docs/*.md            # rewrite every example block from its command
    python scripts/doc_examples.py --check README.md               # exit 1 and name each stale block

An example block is a fenced block under a marker that names the command which produced it:

    <!-- example: tito-audit audit --bundled --quiet -->
    ```
    ...what the command printed (stdout, then stderr)...
    ```

``tito-audit`` runs this checkout's code (``python -m tito_audit``) offline, on the development Hub cache beside
the clone (``../shared/hf-hub``), 120 columns wide, in a scratch folder. A marker may carry ``setup:`` commands
(``; ``-separated) that run first in the same folder, for inputs such as a rollout log written by a script of
``scripts/`` (``python scripts/make_replay_log.py qwen3-0.6b naive_retokenize log.jsonl``), and ``lines: A-B`` to
keep only those lines of the output (1-based, inclusive), for a long report shown in part.

``--check`` compares with the library versions and durations masked (CI installs the newest versions, and a
duration is never the same twice): a block is stale when anything else differs.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
MARKER = re.compile(r"^<!-- example: (?P<spec>.*?) -->\n```[a-z]*\n(?P<body>.*?)```$", re.M | re.S)
VERSIONS = re.compile(r"(tito-audit|transformers|tokenizers|jinja2|hypothesis|torch) \d+(\.\d+)*\S*")
DURATION = re.compile(r"\b\d+(\.\d+)? ?(s|ms|seconds)\b")


@dataclass(frozen=True)
class Example:
    command: str
    setup: tuple[str, ...]
    lines: tuple[int, int] | None

    @classmethod
    def parse(cls, spec: str) -> Example:
        parts = [p.strip() for p in spec.split(" | ")]
        command, setup, lines = parts[0], (), None
        for part in parts[1:]:
            key, _, value = part.partition(":")
            if key == "setup":
                setup = tuple(s.strip() for s in value.split(";") if s.strip())
            elif key == "lines":
                a, _, b = value.strip().partition("-")
                lines = (int(a), int(b))
            else:
                raise SystemExit(f"doc_examples: unknown marker part {part!r} in {spec!r}")
        return cls(command, setup, lines)


def environment() -> dict[str, str]:
    return {
        **os.environ,
        "HF_HUB_CACHE": str(SHARED / "hf-hub"),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
        "COLUMNS": "120",
        "NO_COLOR": "1",
        "TERM": "dumb",
    }


def _argv(command: str) -> list[str]:
    words = shlex.split(command)
    if words[0] == "tito-audit":
        return [sys.executable, "-m", "tito_audit", *words[1:]]
    if words[0] == "python":
        return [sys.executable, *words[1:]]
    return words


def run(example: Example) -> str:
    """What the example's command prints (stdout, then stderr), after its setup, in a scratch folder."""
    env = environment()
    with tempfile.TemporaryDirectory() as scratch:
        for step in example.setup:
            argv = [str(ROOT / a) if a.startswith("scripts/") else a for a in _argv(step)]
            subprocess.run(argv, cwd=scratch, env=env, check=True, capture_output=True, text=True)
        done = subprocess.run(_argv(example.command), cwd=scratch, env=env, capture_output=True, text=True)
        text = done.stdout + done.stderr
    lines = text.rstrip("\n").splitlines()
    if example.lines is not None:
        a, b = example.lines
        lines = lines[a - 1 : b]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def masked(text: str) -> str:
    return DURATION.sub("<t>", VERSIONS.sub(r"\1 <v>", text))


def process(path: Path, check: bool) -> list[str]:
    """Rewrite (or, with ``check``, compare) every example block of one file; the stale blocks' commands."""
    text = path.read_text(encoding="utf-8")
    stale: list[str] = []

    def replace(match: re.Match[str]) -> str:
        example = Example.parse(match["spec"])
        fresh = run(example)
        if masked(fresh) != masked(match["body"]):
            stale.append(f"{path.name}: {example.command}")
        fence = match.group(0).split("\n", 2)[1]
        return f"<!-- example: {match['spec']} -->\n{fence}\n{fresh}```"

    new = MARKER.sub(replace, text)
    if not check and new != text:
        path.write_text(new, encoding="utf-8")
    return stale


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 when a block is stale")
    args = parser.parse_args()
    stale = [s for f in args.files for s in process(f, args.check)]
    for line in stale:
        print(("stale: " if args.check else "updated: ") + line)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
