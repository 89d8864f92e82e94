"""One summary of a scan: counts per class and flag, and the per-template results (``TemplateResult``), as
JSON. The Markdown summary, the terminal table and the HTML page are formats (``tito_audit.formats``).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from tito_audit.report import scan_classes as classify
from tito_audit.report.verdict import MIN_COVERAGE


@dataclass
class TemplateResult:
    name: str
    path: str
    tokenizer: str
    cls: str
    verdict: str | None = None
    reason: str = ""
    error_kind: str | None = None
    flags: list[dict[str, Any]] = field(default_factory=list)
    missing_tokens: list[str] = field(default_factory=list)
    scenarios_ok: int = 0
    scenarios_total: int = 0
    verdict_reasons: list[str] = field(default_factory=list)  # the audit's, as in its JSON report
    adaptations: list[str] = field(default_factory=list)  # conversation shapes the template needed
    tokenizer_reason: str = ""
    engine: str = ""
    seconds: float = 0.0
    # "synthesized": audited on a tokenizer synthesized from the template's control tokens (approximate verdict)
    tokenizer_kind: str = "real"
    tokenizer_base: str | None = None
    synthesized_tokens: list[str] = field(default_factory=list)
    # always_raises: the conversation shapes the template rejected, each with its error (first few)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    approximate: bool = False  # a verdict on a synthesized tokenizer
    # With --tokenizer auto: no candidate's added tokens appear in the template, so the first candidate stands in
    # (a real tokenizer, but not one the template was shown to be written for)
    stand_in: bool = False
    # The first divergent text behind the verdict ("" for a safe one or a template without a verdict)
    first_divergence: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ScanSummary:
    root: str
    tokenizer: str
    results: list[TemplateResult]
    seconds: float = 0.0
    workers: int = 0
    meta: dict[str, Any] = field(default_factory=dict)
    # Templates asked for; more than ``len(results)`` when the scan was interrupted (Ctrl-C) before they finished.
    requested: int | None = None

    @property
    def complete(self) -> bool:
        return self.requested is None or len(self.results) >= self.requested

    @property
    def status(self) -> str:
        """ "" for a complete scan; for one stopped early, what it holds."""
        return (
            "" if self.complete else f"INCOMPLETE: interrupted after {len(self.results)} of {self.requested} templates"
        )

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

    def split_count(self, cls: str, n: int) -> str:
        """``n`` with the approximate verdicts among them said apart: ``10 + 5 approximate``."""
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
            "complete": self.complete,
            "templates": len(self.results),
            "seconds": round(self.seconds, 3),
            "templates_per_second": round(len(self.results) / self.seconds, 2) if self.seconds else None,
            "workers": self.workers,
            "counts": self.counts,
            "approximate": self.approximate_counts,
            "verdicts": {
                "real": sum(1 for r in self.results if r.cls in classify.VERDICTS and not r.approximate),
                "approximate": sum(self.approximate_counts.values()),
                "stand_in": sum(1 for r in self.results if r.cls in classify.VERDICTS and r.stand_in),
            },
            "flags": self.flag_counts,
            "coverage": self.coverage,
            "tokenizers": self.tokenizer_counts,
            "crashes": self.crashes,
            "libraries": libraries(),
            **self.meta,
            "results": [r.to_dict() for r in self.results],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False)

    def names(self, cls: str) -> list[str]:
        """The templates in one class, sorted: a count alone does not say which template to look at."""
        return sorted(r.name for r in self.results if r.cls == cls)


def libraries() -> dict[str, Any]:
    """The versions and compat fallbacks of the process that wrote the summary (its workers are forked from it)."""
    from tito_audit.compat import library_versions

    return dict(library_versions())
