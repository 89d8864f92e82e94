"""SARIF 2.1.0, for code-scanning dashboards: one rule per check id, one result per finding.

Each result points at the audited template file (line 1: a token-level divergence has no line of its own) and
names the model and the scenario as logical locations; suppressed findings stay in the log with a SARIF
``suppressions`` entry, as the standard asks, so that viewers show them as accepted instead of losing them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path, PurePath
from typing import Any

from tito_audit import __version__
from tito_audit.audit import AuditReport, ModelReport
from tito_audit.checks import ordered_checks
from tito_audit.checks.base import CheckResult, Finding
from tito_audit.formats.common import coverage_text, finding_sentence, model_label, template_origin

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
LEVEL = {"error": "error", "warning": "warning"}


def _rule_name(check_id: str) -> str:
    return "".join(part.title() for part in check_id.split("_"))


def _rules(report: AuditReport) -> list[dict[str, Any]]:
    """Every registered check, plus any id a report carries that is not registered (an older report)."""
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


_MODEL_FILES = ("chat_template.jinja", "chat_template.json", "tokenizer_config.json", "additional_chat_templates/")


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
    if not origin.startswith(_MODEL_FILES):
        return _relative(PurePath(origin))
    if p.source == "local":
        return _relative(PurePath(m.model) / origin)
    return f"{p.repo_id or model_label(m)}/{origin}"


def _fingerprint(m: ModelReport, f: Finding) -> str:
    """Stable across runs of the same template: what the finding is, not where the run happened."""
    sha = m.provenance.template_sha256 if m.provenance else ""
    key = "\x1f".join([sha, f.check, f.scenario, f.cls, f.message])
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def _result(m: ModelReport, c: CheckResult, f: Finding, rule_index: int) -> dict[str, Any]:
    label = model_label(m)
    result: dict[str, Any] = {
        "ruleId": c.id,
        "ruleIndex": rule_index,
        "level": LEVEL[c.severity],
        "kind": "fail",
        "message": {"text": f"{label}: {finding_sentence(f)}"},
        "locations": [
            {
                # No line of a template can be blamed for a token-level divergence: the file is the location.
                "physicalLocation": {"artifactLocation": {"uri": artifact_uri(m)}, "region": {"startLine": 1}},
                "logicalLocations": [
                    {
                        "name": f.scenario,
                        "fullyQualifiedName": f"{label}/{f.scenario}",
                        "kind": "member",
                    }
                ],
                "message": {"text": f"template {template_origin(m) or '-'} of {label}"},
            }
        ],
        "partialFingerprints": {"titoFinding/v1": _fingerprint(m, f)},
        "properties": {
            "model": label,
            "verdict": m.verdict,
            "templateSha256": m.provenance.template_sha256 if m.provenance else None,
            "class": f.cls,
            "index": f.index,
            "contextStart": f.context_start,
            "expected": f.expected.to_dict() if f.expected else None,
            "actual": f.actual.to_dict() if f.actual else None,
            "affectedTrainable": f.affected_trainable,
            "rate": f.rate,
        },
    }
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
            results += [_result(m, c, f, index[c.id]) for f in c.findings]
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
                    }
                },
                "invocations": [
                    {
                        "executionSuccessful": not any(m.error for m in report.models),
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
