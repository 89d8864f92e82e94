"""Baselines: gate only on findings that a previous JSON report did not already have.

A finding is identified by (model, check, scenario, class): the model's provenance repo id (else the spec as
given), and never the token index or message, which shift when unrelated parts of a template change. Keys
are counted, so a run with more findings under one key than the baseline has new findings under that key.
Known findings stay active (status and verdict unchanged) and are flagged ``baseline: true``; only the exit
code ignores them.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tito_audit.audit.checks import Finding
from tito_audit.errors import UsageError
from tito_audit.report.model_report import SCHEMA_VERSION, AuditReport, ModelReport

FindingKey = tuple[str, str, str, str]


def model_key(model: str, repo_id: str | None) -> str:
    return repo_id or model


def finding_key(m: ModelReport, f: Finding) -> FindingKey:
    repo = m.provenance.repo_id if m.provenance is not None else None
    return (model_key(m.model, repo), f.check, f.scenario, f.cls)


def describe(key: FindingKey) -> str:
    model, check, scenario, cls = key
    return f"{model} {check} {scenario} ({cls})"


@dataclass
class Baseline:
    path: str
    counts: Counter[FindingKey] = field(default_factory=Counter)


def _major(version: object) -> str | None:
    return version.split(".")[0] if isinstance(version, str) and version else None


def load_baseline(path: Path) -> Baseline:
    """Read a ``--format json`` report; anything else is one ``UsageError`` line naming the file."""
    where = str(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(where, f"cannot read baseline: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(
            where, f"baseline is not JSON ({exc}); make it with `tito-audit audit --format json`"
        ) from None
    if not isinstance(data, dict) or "schema_version" not in data or not isinstance(data.get("models"), list):
        raise UsageError(where, "not a tito-audit JSON report (no schema_version and models)")
    version = data["schema_version"]
    if _major(version) != _major(SCHEMA_VERSION):
        raise UsageError(
            where,
            f"baseline schema_version {version!r} is incompatible with this tool's {SCHEMA_VERSION} "
            "(major version differs); regenerate it with --format json",
        )
    baseline = Baseline(where)
    try:
        for i, m in enumerate(data["models"]):  # noqa: B007 (i names the bad entry)
            prov = m.get("provenance") or {}
            model = model_key(str(m["model"]), prov.get("repo_id"))
            for c in m.get("checks") or []:
                for f in c.get("findings") or []:
                    baseline.counts[(model, str(f["check"]), str(f["scenario"]), str(f["class"]))] += 1
    except (AttributeError, KeyError, TypeError) as exc:
        raise UsageError(where, f"not a tito-audit JSON report: models[{i}] is malformed ({exc!r})") from None
    return baseline


def apply_baseline(report: AuditReport, baseline: Baseline) -> list[tuple[ModelReport, Finding]]:
    """Flag findings the baseline already had; return the new ones (suppressed or not) in report order."""
    left = Counter(baseline.counts)
    new: list[tuple[ModelReport, Finding]] = []
    known = 0
    for m in report.models:
        for c in m.checks:
            for f in c.findings:
                key = finding_key(m, f)
                if left[key] > 0:
                    left[key] -= 1
                    f.baseline = True
                    known += 1
                else:
                    new.append((m, f))
    report.baseline = {"file": baseline.path, "known": known, "new": len(new)}
    return new
