"""Generate the docs that the registry (``tito_audit/registry.py``) holds, as ruff generates each rule's page from
the rule: nothing in them is written by hand, so nothing is written twice.

    python scripts/generate_docs.py           # write every generated page and block
    python scripts/generate_docs.py --check   # write nothing; exit 1 naming every stale one (tests run this)

What it writes:

- ``docs/checks/<id>.md``, one page per registered check: its title, severity and role in the verdict, its
  explanation and fix hint (the words every report carries), its module's docstring after the first line (the
  details and real examples a report does not carry) and how it is judged on a synthesized tokenizer;
- inside hand-written pages, the blocks between ``<!-- generated: NAME -->`` and ``<!-- end generated -->``: the
  index of the checks (docs/checks.md), the renderers ``--renderer`` takes (docs/renderers.md), the log formats
  ``--log-format`` takes (docs/replay.md) and the output formats ``--format`` takes (docs/formats.md). The rest of
  those pages is hand-written (the verdict rule, finding classes, synthesized tokenizers, the CI gate...).

A page of a check that is no longer registered is reported (and removed when writing).
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
CHECK_PAGES = DOCS / "checks"
BEGIN = "<!-- generated: {} (scripts/generate_docs.py; edit the registered module, not this block) -->"
END = "<!-- end generated -->"
ROLE = {
    "unsafe": "decides `unsafe`",
    "tito-required": "decides `tito-required`",
    "caveat": "verdict role `caveat` (its findings are `avoid:` reasons, beside any verdict)",
    None: "no role in the verdict",
}


def markdown(text: str) -> str:
    """A docstring's text as Markdown: its indentation removed, RST's double backticks made single."""
    return inspect.cleandoc(text).replace("``", "`")


def wrapped(text: str) -> str:
    """A one-line text (a check's explanation or fix hint, as reports carry it) as a paragraph of the pages' width."""
    return textwrap.fill(text, width=116, break_long_words=False, break_on_hyphens=False)


def doc_body(doc: str) -> str:
    """A module docstring less its first paragraph (the one-line summary code readers see)."""
    _, _, rest = markdown(doc).partition("\n\n")
    return rest.strip()


def source_of(obj: Any) -> str:
    """The path in the repository of the module an implementation is defined in (from its module's name)."""
    return str(obj.__module__).replace(".", "/") + ".py"


def check_page(entry: Any) -> str:
    spec = entry.obj
    severity = f"severity **{spec.severity}**" if spec.severity == "error" else f"severity {spec.severity}"
    if spec.merge_dependent:
        synthesized = f"Not judged (`not_applicable`): {spec.merge_dependent}."
    elif spec.approximate_classes:
        synthesized = (
            "Run; its finding classes are read from the token boundaries the base's merges draw, so its `data` "
            "says they are approximate."
        )
    else:
        synthesized = "Run; its status was measured to agree with the real tokenizer's."
    parts = [
        f"<!-- generated from {source_of(spec.run)} by scripts/generate_docs.py: edit the module, not this page -->",
        f"# `{spec.id}`",
        f"*{spec.title}* · {severity} · {ROLE[spec.verdict]}",
        "## What it detects, and why it matters for RL",
        wrapped(spec.explanation),
        doc_body(entry.doc),
        "## Fix",
        wrapped(spec.fix_hint),
        "## On a synthesized tokenizer",
        wrapped(f"{synthesized} See [approximate verdicts](../checks.md#synthesized-tokenizers-approximate-verdicts)."),
        "[All checks](../checks.md#the-checks)",
    ]
    return "\n\n".join(p for p in parts if p) + "\n"


def checks_index(checks: Any) -> str:
    rows = ["| check | what it checks | severity | in the verdict |", "|---|---|---|---|"]
    for entry in checks.ordered():
        spec = entry.obj
        severity = "**error**" if spec.severity == "error" else spec.severity
        role = f"`{spec.verdict}`" if spec.verdict else "—"
        rows.append(f"| [`{spec.id}`](checks/{spec.id}.md) | {spec.title} | {severity} | {role} |")
    return "\n".join(rows)


def renderers_table(renderers: Any) -> str:
    rows = ["| name | library (optional extra) | renders | notes |", "|---|---|---|---|"]
    for entry in renderers.ordered():
        meta = entry.meta
        if "usage" in meta:
            names = ", ".join(f"`{u.strip()}`" for u in str(meta["usage"]).split("|"))
        else:
            names = f"`{entry.name}`" + (f", `{entry.name}@{meta['choice']}`" if meta.get("choice") else "")
        notes = [*(f"`{a}`" for a in entry.aliases), *(["default"] if meta.get("default") else [])]
        if notes:
            names += f" ({', '.join(notes)})"
        library = str(meta.get("library", ""))
        if entry.extra and f"[{entry.extra}]" not in library:
            library += f" (`pip install 'tito-audit[{entry.extra}]'`)"
        rows.append(f"| {names} | {library} | {meta.get('renders', '')} | {meta.get('notes', entry.summary)} |")
    return "\n".join(rows)


def log_formats_list(log_formats: Any) -> str:
    items = []
    for entry in log_formats.ordered():
        title = entry.meta.get("title", entry.name)
        body = doc_body(entry.doc) if entry.doc else entry.summary
        text = f"**{title}** (`--log-format {entry.name}`, detected): {body}"
        items.append("- " + text.replace("\n", "\n  "))
    return "\n".join(items)


def output_formats_table(output_formats: Any) -> str:
    rows = ["| `--format` | what it writes |", "|---|---|"]
    rows += [f"| `{e.name}` | {e.summary} |" for e in output_formats.ordered()]
    return "\n".join(rows)


def blocks() -> dict[str, tuple[Path, str]]:
    """Block name -> (the hand-written page it stands in, its generated text)."""
    from tito_audit.audit.checks import REGISTRY  # noqa: F401  (importing the checks fills CHECKS)
    from tito_audit.engines import RENDERERS
    from tito_audit.formats import OUTPUT_FORMATS
    from tito_audit.registry import CHECKS
    from tito_audit.replay.log_formats import LOG_FORMATS

    return {
        "checks": (DOCS / "checks.md", checks_index(CHECKS)),
        "renderers": (DOCS / "renderers.md", renderers_table(RENDERERS)),
        "log formats": (DOCS / "replay.md", log_formats_list(LOG_FORMATS)),
        "output formats": (DOCS / "formats.md", output_formats_table(OUTPUT_FORMATS)),
    }


def with_block(text: str, name: str, body: str, path: Path) -> str:
    begin = BEGIN.format(name)
    pattern = re.compile(re.escape(begin) + r"\n(?:.*?\n)?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise SystemExit(f"generate_docs: {path.relative_to(ROOT)} has no block {begin!r} ... {END!r}")
    return pattern.sub(lambda _: f"{begin}\n{body}\n{END}", text, count=1)


def pages() -> dict[Path, str]:
    """Every generated file (a check page, or a hand-written page with its blocks filled in) -> its text."""
    from tito_audit.audit.checks import REGISTRY  # noqa: F401
    from tito_audit.registry import CHECKS

    out = {CHECK_PAGES / f"{entry.name}.md": check_page(entry) for entry in CHECKS.require().ordered()}
    for name, (path, body) in blocks().items():
        out[path] = with_block(out.get(path) or path.read_text(encoding="utf-8"), name, body, path)
    return out


def stale_pages(out: dict[Path, str]) -> list[Path]:
    """Check pages on disk that no registered check has."""
    return sorted(p for p in CHECK_PAGES.glob("*.md") if p not in out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a generated file is stale")
    args = parser.parse_args(argv)
    out = pages()
    differ = [p for p, text in out.items() if not p.exists() or p.read_text(encoding="utf-8") != text]
    extra = stale_pages(out)
    if args.check:
        for path in differ:
            print(f"stale: {path.relative_to(ROOT)} (run python scripts/generate_docs.py)")
        for path in extra:
            print(f"stale: {path.relative_to(ROOT)} documents no registered check (run scripts/generate_docs.py)")
        return 1 if differ or extra else 0
    CHECK_PAGES.mkdir(exist_ok=True)
    for path in differ:
        path.write_text(out[path], encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    for path in extra:
        path.unlink()
        print(f"removed {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
