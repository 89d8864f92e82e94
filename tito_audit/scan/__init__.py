"""Scanning many templates against one tokenizer (or the best-matching of several), in parallel, under limits.

``scan_directory`` discovers templates (``discover``), loads each tokenizer once (workers inherit them), audits
each template in a worker process (``pool`` -> ``template_audit``: for ``auto`` the worker first picks a tokenizer,
``pick``) with ``audit_model``'s checks and verdict rule (on the quick scenario set unless ``PoolLimits.scenarios``
says ``full``), and returns one ``ScanSummary`` in which every template has exactly one class (``classify``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from os import PathLike
from typing import Any

from tito_audit.errors import UsageError
from tito_audit.report.scan_classes import CLASSES, DESCRIPTIONS
from tito_audit.report.scan_report import ScanSummary, TemplateResult
from tito_audit.scan.discover import TemplateFile, discover, discover_paths, read_template
from tito_audit.scan.pool import AUTO, Job, JobsInterrupted, PoolLimits, run_jobs
from tito_audit.scan.template_audit import audit_template
from tito_audit.sources.synthesized import Synthesizer

__all__ = [
    "AUTO",
    "CLASSES",
    "DESCRIPTIONS",
    "Job",
    "PoolLimits",
    "ScanInterrupted",
    "ScanSummary",
    "TemplateFile",
    "TemplateResult",
    "audit_template",
    "discover",
    "discover_paths",
    "load_tokenizers",
    "plan",
    "scan_directory",
]


def load_tokenizers(specs: Sequence[str], offline: bool = False) -> dict[str, Any]:
    """Each spec loaded once (``LoadedModel``); AuditErrors propagate as one-line errors."""
    from tito_audit.sources.load import load

    models: dict[str, Any] = {}
    for spec in dict.fromkeys(specs):
        models[spec] = load(spec, offline=offline)
    return models


def plan(templates: Sequence[TemplateFile], models: dict[str, Any], tokenizer: str) -> list[Job]:
    """One job per template, with the tokenizer it is audited against; ``auto`` is picked by the worker, which
    parses the template anyway (``template_audit.audit_auto``)."""
    return [Job(i, t, tokenizer, "" if tokenizer == AUTO else "given") for i, t in enumerate(templates)]


def synthesizer_for(templates: Sequence[TemplateFile], models: dict[str, Any]) -> Synthesizer:
    """One synthesizer for the scan: each base is copied once per worker with the control tokens of every template
    scanned (``Synthesizer``'s ``vocabulary``; each audit sees only its own)."""
    from tito_audit.sources.control_tokens import control_literals

    vocabulary: dict[str, None] = {}
    for t in templates:
        try:
            vocabulary.update(dict.fromkeys(control_literals(read_template(t.path))))
        except (OSError, ValueError):
            continue  # the worker classifies it
    return Synthesizer(models, sorted(vocabulary))


def before_fork(models: dict[str, Any], synthesizer: Synthesizer | None) -> None:
    """What every worker would build for itself, built once in this process so that the forked workers share it
    (copy-on-write): each candidate's added-token pattern and segment encoder, and the synthesized bases
    (``Synthesizer.prepare``). Worth it when each worker meets every candidate (many more templates than workers
    times candidates). Only a head start: whatever fails here is left to the worker that needs it, which
    classifies it as it would have."""
    from tito_audit.rendering.tokenizer_cache import tokenizer_cache

    for model in models.values():
        try:
            tokenizer_cache(model.tokenizer).prepare()  # computed once, kept by the cache
        except Exception:  # a transformers without the pattern builder: the worker does without
            continue
    if synthesizer is not None:
        synthesizer.prepare()


def scan_directory(
    root: str | PathLike[str] | Sequence[str | PathLike[str]],
    tokenizer: str,
    candidates: Sequence[str] = (),
    limits: PoolLimits | None = None,
    offline: bool = False,
    limit: int | None = None,
    on_result: Callable[[TemplateResult], None] | None = None,
    on_planned: Callable[[int], None] | None = None,
) -> ScanSummary:
    """Scan ``root``: a folder or template file, or several of them (``discover_paths``)."""
    limits = limits or PoolLimits()
    roots = [root] if isinstance(root, str | PathLike) else list(root)
    templates = discover_paths(roots)
    if limit is not None:
        templates = templates[:limit]
    if tokenizer == AUTO:
        from tito_audit.sources import bundled_names

        specs = list(candidates) or bundled_names()
        if not specs:
            raise UsageError("--tokenizer auto", "no candidate tokenizers (none bundled and none given)")
    else:
        specs = [tokenizer]
    started = time.perf_counter()
    models = load_tokenizers(specs, offline=offline)
    load_s = time.perf_counter() - started
    jobs = plan(templates, models, tokenizer)
    if on_planned is not None:
        on_planned(len(jobs))
    synthesizer = synthesizer_for(templates, models) if tokenizer == AUTO and limits.synthesize else None
    if limits.workers > 1 and len(jobs) > limits.workers * len(models):
        before_fork(models, synthesizer)

    def summary(results: list[TemplateResult], requested: int | None = None) -> ScanSummary:
        return ScanSummary(
            root=" ".join(str(r) for r in roots),
            tokenizer=tokenizer,
            results=results,
            seconds=time.perf_counter() - started,
            workers=limits.workers,
            meta={"candidates": specs, "tokenizer_load_seconds": round(load_s, 3), "scenarios": limits.scenarios},
            requested=requested,
        )

    try:
        return summary(run_jobs(jobs, models, limits, on_result, synthesizer))
    except JobsInterrupted as stop:
        raise ScanInterrupted(summary(stop.results, requested=len(jobs))) from None


class ScanInterrupted(Exception):
    """Ctrl-C during ``scan_directory``: ``summary`` holds the templates that finished (``complete`` False)."""

    def __init__(self, summary: ScanSummary) -> None:
        super().__init__(summary.status)
        self.summary = summary
