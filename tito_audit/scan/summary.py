"""One summary of a scan: counts per class and flag, and the per-template results, as JSON, Markdown or a
table.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tito_audit.quote import clipped
from tito_audit.scan import classify
from tito_audit.scan.template_audit import TemplateResult
from tito_audit.verdict import MIN_COVERAGE


@dataclass
class ScanSummary:
    root: str
    tokenizer: str
    results: list[TemplateResult]
    seconds: float = 0.0
    workers: int = 0
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def counts(self) -> dict[str, int]:
        got = Counter(r.cls for r in self.results)
        return {c: got[c] for c in classify.CLASSES if got[c]} | {
            c: n for c, n in got.items() if c not in classify.CLASSES
        }

    @property
    def approximate_counts(self) -> dict[str, int]:
        """Verdicts given on a synthesized tokenizer (``counts`` includes them): counted apart, as approximate."""
        got = Counter(r.cls for r in self.results if r.approximate)
        return {c: got[c] for c in classify.VERDICTS if got[c]}

    def _split(self, cls: str, n: int) -> str:
        approx = self.approximate_counts.get(cls, 0)
        return f"{n - approx} + {approx} approximate" if approx else str(n)

    @property
    def flag_counts(self) -> dict[str, int]:
        got = Counter(k for r in self.results for k in {f["kind"] for f in r.flags})
        return dict(sorted(got.items()))

    @property
    def tokenizer_counts(self) -> dict[str, int]:
        return dict(Counter(r.tokenizer for r in self.results).most_common())

    @property
    def coverage(self) -> dict[str, int]:
        """Templates with a verdict that played fewer than MIN_COVERAGE scenarios, that reject every tool
        conversation, and that needed an adaptation (per adaptation)."""
        judged = [r for r in self.results if r.verdict]
        out = {
            f"verdict_on_fewer_than_{MIN_COVERAGE}_scenarios": sum(1 for r in judged if r.scenarios_ok < MIN_COVERAGE),
            "rejects_tool_traffic": sum(1 for r in self.results if "unsafe:rejects_tool_traffic" in r.verdict_reasons),
        }
        adapted = Counter(a for r in judged for a in r.adaptations)
        return out | {f"adapted_{a}": n for a, n in sorted(adapted.items())}

    @property
    def crashes(self) -> int:
        return sum(1 for r in self.results if r.cls == classify.WORKER_CRASH or not r.cls)

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "tokenizer": self.tokenizer,
            "templates": len(self.results),
            "seconds": round(self.seconds, 3),
            "templates_per_second": round(len(self.results) / self.seconds, 2) if self.seconds else None,
            "workers": self.workers,
            "counts": self.counts,
            "approximate": self.approximate_counts,
            "verdicts": {
                "real": sum(1 for r in self.results if r.cls in classify.VERDICTS and not r.approximate),
                "approximate": sum(self.approximate_counts.values()),
            },
            "flags": self.flag_counts,
            "coverage": self.coverage,
            "tokenizers": self.tokenizer_counts,
            "crashes": self.crashes,
            "libraries": _libraries(),
            **self.meta,
            "results": [r.to_dict() for r in self.results],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False)

    def names(self, cls: str) -> list[str]:
        """The templates in one class, sorted: a count alone does not say which template to look at."""
        return sorted(r.name for r in self.results if r.cls == cls)

    def to_markdown(self, show: int = 20) -> str:
        from tito_audit.formats.labels import versions_text
        from tito_audit.formats.markdown import md_code, md_text

        lines = [
            f"# Template scan: {md_code(self.root)}",
            "",
            f"{len(self.results)} templates, tokenizer {md_code(self.tokenizer)}, {self.seconds:.1f}s "
            f"with {self.workers} worker(s); {versions_text(_libraries())}.",
            "",
            "| class | templates | meaning |",
            "|---|---:|---|",
        ]
        lines += [
            f"| {c} | {self._split(c, n)} | {md_text(classify.DESCRIPTIONS.get(c, ''))} |"
            for c, n in self.counts.items()
        ]
        if self.approximate_counts:
            lines += [
                "",
                f"Approximate: {sum(self.approximate_counts.values())} verdicts on a tokenizer synthesized from the "
                "template's own control tokens (no candidate tokenizer had them; see docs/checks.md).",
            ]
        if self.flag_counts:
            lines += ["", "| flag | templates |", "|---|---:|"]
            lines += [f"| {md_text(k)} | {n} |" for k, n in self.flag_counts.items()]
        lines += ["", "| coverage | templates |", "|---|---:|"]
        lines += [f"| {k.replace('_', ' ')} | {n} |" for k, n in self.coverage.items()]
        lines += ["", "## Templates by class"]
        for c, n in self.counts.items():
            lines += ["", f"**{c}** ({n}): " + ", ".join(md_code(name) for name in self.names(c))]
        errors = [r for r in self.results if r.cls in classify.ERROR_CLASSES][:show]
        if errors:
            lines += ["", "| template | class | reason |", "|---|---|---|"]
            lines += [
                f"| {md_code(r.name, in_table=True)} | {r.cls} | {md_text(clipped(r.reason, 120))} |" for r in errors
            ]
        return "\n".join(lines) + "\n"

    def to_table(self, names_shown: int = 4) -> Any:
        from rich.markup import escape
        from rich.table import Table

        from tito_audit.formats.labels import versions_text

        table = Table(
            title=f"{len(self.results)} templates · {self.seconds:.1f}s · {self.workers} worker(s)",
            caption=versions_text(_libraries()),
        )
        table.add_column("class")
        table.add_column("templates", justify="right")
        table.add_column("meaning")
        table.add_column("which", overflow="fold")
        for c, n in self.counts.items():
            names = self.names(c)
            which = ", ".join(names[:names_shown]) + (f" and {n - names_shown} more" if n > names_shown else "")
            table.add_row(c, self._split(c, n), classify.DESCRIPTIONS.get(c, ""), escape(which))
        for k, n in self.flag_counts.items():
            table.add_row(f"[dim]flag: {k}[/dim]", str(n), "", "")
        for k, n in self.coverage.items():
            table.add_row(f"[dim]coverage: {k.replace('_', ' ')}[/dim]", str(n), "", "")
        return table


def _libraries() -> dict[str, Any]:
    """The versions and compat fallbacks of the process that wrote the summary (its workers are forked from it)."""
    from tito_audit.compat import library_versions

    return dict(library_versions())
