"""A failure of tito-audit itself during a scan (a worker process that dies, an exception in our code) is never
passed off as a class of the template: the scan exits 3 and names the template and the cause on stderr; every
other template is in the report, and template failures keep their classes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import invoke

MODEL = "qwen2.5-7b-instruct"
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
BROKEN = "{% for m in messages %}{{ m.content }"  # does not compile: the template's own failure


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    out = tmp_path / "templates"
    out.mkdir()
    for name in ("a", "b"):
        (out / f"{name}.jinja").write_text(CHATML)
    (out / "broken.jinja").write_text(BROKEN)
    return out


def scan(folder: Path, *extra: str):  # type: ignore[no-untyped-def]
    summary = folder.parent / "scan.json"
    done = invoke("scan", str(folder), "--tokenizer", MODEL, "--no-progress", "--json", str(summary), *extra)
    return done, json.loads(summary.read_text())


def test_a_worker_that_dies_is_exit_3_with_the_cause(folder, monkeypatch) -> None:
    from tito_audit.scan import pool

    real = pool._run_job

    def dies_on_a(job, *args):  # type: ignore[no-untyped-def]
        if job.template.name == "a":
            os._exit(9)  # as a crash in C code would end the worker
        return real(job, *args)

    monkeypatch.setattr(pool, "_run_job", dies_on_a)  # what the forked workers run: they inherit it
    done, summary = scan(folder, "--workers", "1")
    assert done.exit_code == 3, done.output
    by = {r["name"]: r for r in summary["results"]}
    assert by["a"]["cls"] == "worker_crash" and by["b"]["cls"] in ("safe", "tito-required", "unsafe")
    assert by["broken"]["cls"] == "does_not_compile"  # the template's own failure keeps its class
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert lines == ["error: a: tito-audit failed on this template (worker_crash: worker process died (exit code 9)); "
                     "not a finding about the template"]  # fmt: skip


def test_an_exception_of_ours_is_exit_3_with_the_cause(folder, monkeypatch) -> None:
    from tito_audit.scan import template_audit

    real = template_audit._audit

    def fails_on_b(template, *args, **kwargs):  # type: ignore[no-untyped-def]
        if template.name == "b":
            raise RuntimeError("a bug of ours")
        return real(template, *args, **kwargs)

    monkeypatch.setattr(template_audit, "_audit", fails_on_b)
    done, summary = scan(folder, "--workers", "0")
    assert done.exit_code == 3, done.output
    by = {r["name"]: r for r in summary["results"]}
    assert by["b"]["cls"] == "audit_error" and by["a"]["cls"] != "audit_error"
    assert "error: b: tito-audit failed on this template (audit_error: RuntimeError: a bug of ours)" in done.stderr
    assert by["broken"]["cls"] == "does_not_compile"


def test_template_failures_alone_exit_0(folder) -> None:
    done, summary = scan(folder, "--workers", "0")
    assert done.exit_code == 0 and "error:" not in done.stderr, done.output
    assert {r["cls"] for r in summary["results"] if r["name"] == "broken"} == {"does_not_compile"}
