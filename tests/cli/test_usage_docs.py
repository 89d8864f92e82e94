"""The documented usage lines and each command's ``--help`` agree: every option a command takes appears in that
command's usage block, and every option a usage block names exists. A usage block is an indented line
``tito-audit COMMAND ...`` that shows optional options (``[--x ...]``), with the more indented ``[...]`` lines that
continue it; each command has exactly one, in the README or on its page in docs/ (docs/audit.md, docs/scan.md...)."""

from __future__ import annotations

import re

import pytest
import typer.main
from typer.testing import CliRunner

from tests.conftest import ROOT
from tito_audit.audit.context import THINKING
from tito_audit.cli import COMMANDS, app
from tito_audit.cli.audit import FAIL_ON
from tito_audit.cli.params import FORMAT_NAMES

PAGES = {p: p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
OPTION = re.compile(r"(?<![\w-])--?[a-zA-Z][\w-]*")


def command(name: str):
    return typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]


def help_options(name: str) -> list[set[str]]:
    """Each option of the command as the set of its spellings (``--synthesize``/``--no-synthesize``, ``-k``)."""
    return [
        {o for o in (*p.opts, *p.secondary_opts) if o.startswith("-")}
        for p in command(name).params
        if any(o.startswith("-") for o in p.opts) and "--help" not in p.opts
    ]


def usage_blocks(name: str) -> list[str]:
    return [block for text in PAGES.values() for block in _blocks(text, name)]


def _blocks(text: str, name: str) -> list[str]:
    lines = text.splitlines()
    blocks = []
    for i, line in enumerate(lines):
        m = re.match(rf"^(\s+)tito-audit {name}\b", line)
        if not m or "[" not in line:
            continue
        block, indent = [line], len(m.group(1))
        for nxt in lines[i + 1 :]:
            stripped = nxt.lstrip()
            if not stripped.startswith("[") or len(nxt) - len(stripped) <= indent:
                break
            block.append(nxt)
        blocks.append("\n".join(block))
    return blocks


def values(block: str, option: str) -> set[str]:
    """``[--thinking both|on|off|unset]`` -> the values listed for ``option``."""
    m = re.search(rf"{option} ([\w|-]+)\]", block)
    assert m, f"{option} lists no values in {block}"
    return set(m.group(1).split("|"))


@pytest.mark.parametrize("name", COMMANDS)
def test_usage_block_and_help_name_the_same_options(name: str) -> None:
    blocks = usage_blocks(name)  # one, or a page's main block and those of its parts (replay's --engine ray, --weights)
    assert blocks, f"no documented usage block for `tito-audit {name}`"
    shown = set(OPTION.findall("\n".join(blocks)))
    options = help_options(name)
    missing = [sorted(o) for o in options if not o & shown]
    assert not missing, f"`tito-audit {name} --help` options missing from its documented usage: {missing}"
    known = set().union(*options)
    assert shown <= known, f"documented usage of `tito-audit {name}` names options it lacks: {sorted(shown - known)}"


def test_help_lists_every_option_it_takes() -> None:
    """The other side of the agreement: what the README is held to is what `--help` prints."""
    for name in COMMANDS:
        out = CliRunner().invoke(app, [name, "--help"], env={"COLUMNS": "250"}).output
        for spellings in help_options(name):
            assert any(s in out for s in spellings), (name, spellings)


def test_listed_values_are_the_values_taken() -> None:
    audit = usage_blocks("audit")[0]
    assert values(audit, "--thinking") == set(THINKING)
    assert values(audit, "--format") == set(FORMAT_NAMES)
    assert values(audit, "--fail-on") == set(FAIL_ON)


@pytest.mark.parametrize(
    ("value", "modes"),
    [("both", [{}, {"enable_thinking": True}, {"enable_thinking": False}]), ("unset", [{}])],
)
def test_thinking_values(value: str, modes: list[dict]) -> None:
    """``--thinking`` listed a value named ``default`` while its default is ``both``; the default mode alone is
    ``unset`` (no reasoning switch passed)."""
    import json

    thinking = next(p for p in command("audit").params if "--thinking" in p.opts)
    assert thinking.default == "both" and "default" not in THINKING
    r = CliRunner().invoke(app, ["audit", "qwen3-0.6b", "--thinking", value, "--format", "json"])
    assert r.exit_code in (0, 1), r.output
    assert json.loads(r.stdout)["models"][0]["scenarios"]["thinking_modes"] == modes


def section_of(block: str) -> str:
    """The page's section that holds ``block`` (from the ``## `` heading before it to the next), without the block
    itself."""
    path, page = next((path, text) for path, text in PAGES.items() if block in text)
    if path.parent.name == "docs":  # a command's own page: all of it is its section
        return page.replace(block, "")
    at = page.index(block)
    start = max(page.rfind("\n## ", 0, at), 0)
    end = page.find("\n## ", at)
    return page[start : end if end != -1 else len(page)].replace(block, "")


@pytest.mark.parametrize("name", ["scan", "rl"])
def test_every_option_is_described_in_its_section(name: str) -> None:
    """Issue 31: `scan --help` and `rl --help` had options the README only listed in the usage line, or not at
    all; each option is described in the command's own section, beside its usage block."""
    prose = section_of(usage_blocks(name)[0])
    undescribed = [sorted(o) for o in help_options(name) if not any(re.search(rf"`{s}[` =]", prose) for s in o)]
    assert not undescribed, f"documented section of `tito-audit {name}` does not describe {undescribed}"
