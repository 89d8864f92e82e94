"""The JSON report validates against the published schema, and the schema stays in step with the code."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT, SHARED_MODELS
from tito_audit.audit.checks import FINDING_CLASSES
from tito_audit.errors import ModelNotFound
from tito_audit.formats import render_report
from tito_audit.report.model_report import SCHEMA_VERSION, AuditReport, error_report

jsonschema = pytest.importorskip("jsonschema")
SCHEMA = json.loads((ROOT / "docs" / "report.schema.json").read_text())


def test_reports_of_every_shared_model_and_an_error_validate(report):
    reports = [report(m) for m in SHARED_MODELS]
    reports.append(error_report("nobody/nothing", ModelNotFound("nobody/nothing", "repository not found")))
    doc = json.loads(render_report(AuditReport(reports), "json"))
    jsonschema.validate(doc, SCHEMA)
    assert doc["schema_version"] == SCHEMA_VERSION
    assert doc["models"][-1]["verdict"] == "error" and doc["models"][-1]["error"].startswith("nobody/nothing")


def test_schema_enumerates_the_finding_classes_the_code_uses():
    assert SCHEMA["$defs"]["finding"]["properties"]["class"]["enum"] == list(FINDING_CLASSES)


def test_schema_major_version_matches_the_code():
    pattern = SCHEMA["properties"]["schema_version"]["pattern"]
    assert pattern.startswith("^" + SCHEMA_VERSION.split(".")[0] + "\\.")


def test_a_broken_report_is_rejected():
    bad = {"schema_version": SCHEMA_VERSION, "tool_version": "x", "models": [{"model": "m", "verdict": "maybe"}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCHEMA)
