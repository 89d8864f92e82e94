"""SARIF 2.1.0, for code-scanning dashboards: one rule per check id, one result per check and root cause.

A check's findings of one class are one result (a template with one history rewrite is one alert, not one per
scenario): the first finding says what diverges, the others are related locations (the first 20) and the
``findings``/``scenarios`` properties count them all. Each result points at the audited template file: the
user's own file when it is local (a local model folder, ``--chat-template``), on the Jinja line responsible
when the template's code says which (``formats.template_lines``), else line 1. Suppressed findings stay in the
log with a SARIF ``suppressions`` entry, as the standard asks, so that viewers show them as accepted.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from tito_audit._version import __version__
from tito_audit.formats.divergence import finding_sentence
from tito_audit.formats.labels import coverage_text, model_label, template_origin
from tito_audit.formats.template_lines import MODEL_FILES, blame, local_template
from tito_audit.registry import OUTPUT_FORMATS
from tito_audit.report.quote import clipped

if TYPE_CHECKING:
    from tito_audit.report.check_result import CheckResult
    from tito_audit.report.findings import Finding
    from tito_audit.report.model_report import AuditReport, ModelReport

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
LEVEL = {"error": "error", "warning": "warning"}


def _rule_name(check_id: str) -> str:
    return "".join(part.title() for part in check_id.split("_"))


def _rules(report: AuditReport) -> list[dict[str, Any]]:
    """Every registered check, plus any id a report carries that is not registered (an older report)."""
    from tito_audit.audit.checks import ordered_checks  # (the checks load the audit: not when formats register)

    specs = {s.id: (s.title, s.severity, s.explanation, s.fix_hint) for s in ordered_checks()}
    for m in report.models:
        for c in m.checks:
            specs.setdefault(c.id, (c.title, c.severity, c.explanation, c.fix_hint))
    return [
        {
            "id": cid,
            "name": _rule_name(cid),
            "shortDescription": {"text": title},
            "fullDescription": {"text": explanation},
            "help": {"text": f"Fix: {fix_hint}", "markdown": f"**Fix:** {fix_hint}"},
            "defaultConfiguration": {"level": LEVEL[severity]},
            "properties": {"severity": severity},
        }
        for cid, (title, severity, explanation, fix_hint) in specs.items()
    ]


def _relative(path: PurePath) -> str:
    """Repository-relative when possible (code scanning accepts only those), never an absolute path."""
    if not path.is_absolute():
        return path.as_posix()
    try:
        return Path(path).relative_to(Path.cwd()).as_posix()
    except ValueError:
        return path.name


def artifact_uri(m: ModelReport) -> str:
    """The audited template as a relative path: a ``--chat-template`` file as given, a local model's file under
    its folder, a Hub model's under its repo id (code scanning rejects results without a physical location)."""
    p = m.provenance
    if p is None:
        return model_label(m)
    origin = p.template_file
    if not origin.startswith(MODEL_FILES):
        return _relative(PurePath(origin))
    if p.source == "local":
        return _relative(PurePath(m.model) / origin)
    return f"{p.repo_id or model_label(m)}/{origin}"


def root_causes(c: CheckResult) -> list[list[Finding]]:
    """A check's findings grouped by root cause (their class), suppressed ones apart: one SARIF result each,
    instead of one per scenario (Qwen3's single history rewrite is 133 findings)."""
    groups: dict[tuple[str, bool], list[Finding]] = {}
    for f in c.findings:
        groups.setdefault((f.cls, f.suppressed), []).append(f)
    return list(groups.values())


def _fingerprint(m: ModelReport, c: CheckResult, cls: str, suppressed: bool) -> str:
    """Stable across runs of the same template: which root cause it is, not where the run happened nor how many
    scenarios showed it."""
    # where a renderer renders instead of a template, its identity (``template_file``) stands for the template
    sha = (m.provenance.template_sha256 or m.provenance.template_file) if m.provenance else ""
    key = "\x1f".join([sha, c.id, cls, "suppressed" if suppressed else ""])
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def _logical(label: str, scenario: str) -> dict[str, str]:
    return {"name": scenario, "fullyQualifiedName": f"{label}/{scenario}", "kind": "member"}


RELATED_SHOWN = 20  # related locations per result; the count of findings is always complete


def _result(
    m: ModelReport, c: CheckResult, group: list[Finding], rule_index: int, source: str | None
) -> dict[str, Any]:
    label = model_label(m)
    with_tokens = [f for f in group if f.expected is not None and f.actual is not None]
    f = (with_tokens or group)[0]
    scenarios = list(dict.fromkeys(g.scenario for g in group))
    text = f"{label}: {finding_sentence(f)}"
    if len(group) > 1:
        text += f" ({len(group)} findings of this kind in {len(scenarios)} scenario(s))"
    blamed = blame(source, c.id, f.cls) if source is not None else None
    region: dict[str, Any] = {"startLine": blamed.line if blamed else 1}
    if blamed:
        text += f" Line {blamed.line}: {blamed.why}."
    others = [g for g in group if g is not f]
    related = [
        {"id": k, "logicalLocations": [_logical(label, g.scenario)], "message": {"text": clipped(g.message, 300)}}
        for k, g in enumerate(others[:RELATED_SHOWN], 1)
    ]
    result: dict[str, Any] = {
        "ruleId": c.id,
        "ruleIndex": rule_index,
        "level": LEVEL[c.severity],
        "kind": "fail",
        "message": {"text": text},
        "locations": [
            {
                "physicalLocation": {"artifactLocation": {"uri": artifact_uri(m)}, "region": region},
                "logicalLocations": [_logical(label, f.scenario)],
                "message": {"text": f"template {template_origin(m) or '-'} of {label}"},
            }
        ],
        "partialFingerprints": {"titoFinding/v1": _fingerprint(m, c, f.cls, f.suppressed)},
        "properties": {
            "model": label,
            "verdict": m.verdict,
            "templateSha256": m.provenance.template_sha256 if m.provenance else None,
            "class": f.cls,
            "findings": len(group),
            "scenarios": scenarios,
            "lineKnown": blamed is not None,
            "index": f.index,
            "contextStart": f.context_start,
            "expected": f.expected.to_dict() if f.expected else None,
            "actual": f.actual.to_dict() if f.actual else None,
            "affectedTrainable": sum(g.affected_trainable for g in group),
            "rate": f.rate,
        },
    }
    if related:
        result["relatedLocations"] = related
    if f.suppressed:
        result["suppressions"] = [
            {"kind": "external", "status": "accepted", "justification": f.suppression_reason or ""}
        ]
    return result


def to_sarif_dict(report: AuditReport) -> dict[str, Any]:
    rules = _rules(report)
    index = {r["id"]: i for i, r in enumerate(rules)}
    results: list[dict[str, Any]] = []
    notifications: list[dict[str, Any]] = []
    for m in report.models:
        local = local_template(m)
        source = local[1] if local else None
        if m.error:
            notifications.append({"level": "error", "message": {"text": m.error}})
        for c in m.checks:
            if c.status == "error":
                notifications.append(
                    {
                        "level": "error",
                        "message": {"text": f"{model_label(m)}: check {c.id} could not run: {c.summary}"},
                        "associatedRule": {"id": c.id, "index": index[c.id]},
                    }
                )
            results += [_result(m, c, group, index[c.id], source) for group in root_causes(c)]
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "tito-audit",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "rules": rules,
                        "properties": {"libraries": report.libraries},
                    }
                },
                "invocations": [
                    {
                        "executionSuccessful": report.complete and not any(m.error for m in report.models),
                        "toolExecutionNotifications": notifications,
                    }
                ],
                "results": results,
                "properties": {
                    "models": [
                        {
                            "model": model_label(m),
                            "verdict": m.verdict,
                            "verdict_reasons": m.verdict_reasons,
                            "coverage": coverage_text(m),
                            "provenance": m.provenance.to_dict() if m.provenance else None,
                        }
                        for m in report.models
                    ]
                },
            }
        ],
    }


def to_sarif(report: AuditReport, **_: Any) -> str:
    return json.dumps(to_sarif_dict(report), indent=2, ensure_ascii=False) + "\n"


OUTPUT_FORMATS.register(
    "sarif",
    "SARIF 2.1.0 for code scanning (GitHub), each finding located in the template's source",
    to_sarif,
    doc=__doc__,
    order=50,
)
