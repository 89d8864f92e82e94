"""One summary of a scan: counts per class and flag, and the per-template results, as JSON, Markdown or a
table.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tito_audit.scan import classify as C
from tito_audit.scan.one import TemplateResult
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
        return {c: got[c] for c in C.CLASSES if got[c]} | {c: n for c, n in got.items() if c not in C.CLASSES}

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
        return sum(1 for r in self.results if r.cls == C.WORKER_CRASH or not r.cls)

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "tokenizer": self.tokenizer,
            "templates": len(self.results),
            "seconds": round(self.seconds, 3),
            "templates_per_second": round(len(self.results) / self.seconds, 2) if self.seconds else None,
            "workers": self.workers,
            "counts": self.counts,
            "flags": self.flag_counts,
            "coverage": self.coverage,
            "tokenizers": self.tokenizer_counts,
            "crashes": self.crashes,
            **self.meta,
            "results": [r.to_dict() for r in self.results],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False)

    def to_markdown(self, show: int = 20) -> str:
        lines = [
            f"# Template scan: `{self.root}`",
            "",
            f"{len(self.results)} templates, tokenizer `{self.tokenizer}`, {self.seconds:.1f}s "
            f"with {self.workers} worker(s).",
            "",
            "| class | templates | meaning |",
            "|---|---:|---|",
        ]
        lines += [f"| {c} | {n} | {C.DESCRIPTIONS.get(c, '')} |" for c, n in self.counts.items()]
        if self.flag_counts:
            lines += ["", "| flag | templates |", "|---|---:|"]
            lines += [f"| {k} | {n} |" for k, n in self.flag_counts.items()]
        lines += ["", "| coverage | templates |", "|---|---:|"]
        lines += [f"| {k.replace('_', ' ')} | {n} |" for k, n in self.coverage.items()]
        errors = [r for r in self.results if r.cls in C.ERROR_CLASSES][:show]
        if errors:
            lines += ["", "| template | class | reason |", "|---|---|---|"]
            lines += [f"| {r.name} | {r.cls} | {r.reason.replace('|', '/')[:120]} |" for r in errors]
        return "\n".join(lines) + "\n"

    def to_table(self) -> Any:
        from rich.table import Table

        table = Table(title=f"{len(self.results)} templates · {self.seconds:.1f}s · {self.workers} worker(s)")
        table.add_column("class")
        table.add_column("templates", justify="right")
        table.add_column("meaning")
        for c, n in self.counts.items():
            table.add_row(c, str(n), C.DESCRIPTIONS.get(c, ""))
        for k, n in self.flag_counts.items():
            table.add_row(f"[dim]flag: {k}[/dim]", str(n), "")
        for k, n in self.coverage.items():
            table.add_row(f"[dim]coverage: {k.replace('_', ' ')}[/dim]", str(n), "")
        return table
