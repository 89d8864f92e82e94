"""Every template stopped in seconds: a per-template budget (``rendering.budget``) for audit, fix, table and replay.

Timings are in ``benchmarks/bench_hostile_audit.py``; here, what the budget decides."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import DATA, ROOT
from tito_audit.errors import RenderError
from tito_audit.rendering import Renderer, RenderLimits
from tito_audit.rendering.budget import BUDGET_KIND, TemplateBudget
from tito_audit.rendering.guard import AUDIT_LIMITS, REPLAY_LIMITS

HOSTILE = DATA / "hostile"
MSGS = [{"role": "user", "content": "Hello"}]
# Templates that spend CPU or memory on every render (or on every tool turn): each must end limit_exceeded.
CPU_BURNERS = (
    "busy_loop", "cpuloop", "slow_render", "tool_turn_loop", "late_turn_memory", "exponential_growth", "token_flood"
)  # fmt: skip


@cache
def _model():
    from tito_audit.sources.load import load

    return load("qwen3-0.6b")


def _other(messages_count: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"turn {k}"} for k in range(messages_count)]


def test_budget_counts_limit_hits_and_cpu() -> None:
    hits = TemplateBudget(cpu_seconds=0, limit_hits=2)
    hits.charge(2.0, True)
    assert hits.stopped is None
    hits.charge(0.1, False)
    hits.charge(2.0, True)
    assert hits.stopped is not None and "2 renders" in hits.stopped
    cpu = TemplateBudget(cpu_seconds=5.0, limit_hits=0)
    for _ in range(3):
        cpu.charge(1.9, False)
    assert cpu.stopped is not None and "5s of CPU" in cpu.stopped
    capped = TemplateBudget(cpu_seconds=3.0, limit_hits=0)
    assert capped.render_seconds(2.0) == 2.0
    capped.charge(1.5, False)
    assert capped.render_seconds(2.0) == 1.5  # the total bounds the next render: it cannot overshoot by 2 s
    off = TemplateBudget(cpu_seconds=0, limit_hits=0)
    for _ in range(10):
        off.charge(3.0, True)
    assert off.stopped is None


def test_a_template_that_hits_its_limit_twice_is_refused_without_running() -> None:
    text = (HOSTILE / "cpuloop.jinja").read_text()
    renderer = Renderer(_model().tokenizer, text, limits=replace(AUDIT_LIMITS, seconds=0.2))
    kinds = []
    for k in range(1, 5):
        try:
            renderer.render(_other(k))
        except RenderError as err:
            kinds.append(err.kind)
    assert kinds == ["timeout", "timeout", BUDGET_KIND, BUDGET_KIND]
    assert renderer.budget.hits == 2  # the refused renders did not run: no more hits were charged
    derived = renderer.with_kwargs(enable_thinking=False)
    with pytest.raises(RenderError) as info:
        derived.render(_other(7))  # every renderer derived from it shares the budget
    assert info.value.kind == BUDGET_KIND and "per-template budget" in info.value.message


def test_a_library_renderer_has_no_budget() -> None:
    """A trainer's renderer renders for as long as it trains: no total, no count (``RenderLimits()``)."""
    text = (HOSTILE / "cpuloop.jinja").read_text()
    renderer = Renderer(_model().tokenizer, text, limits=RenderLimits(seconds=0.1))
    for k in range(1, 4):
        with pytest.raises(RenderError) as info:
            renderer.render(_other(k))
        assert info.value.kind == "timeout"
    assert renderer.budget.stopped is None
    assert REPLAY_LIMITS.template_limit_hits and not REPLAY_LIMITS.template_cpu_seconds  # replay: hits only


@pytest.mark.slow
@pytest.mark.parametrize("name", CPU_BURNERS)
def test_every_cpu_burning_template_ends_limit_exceeded(name: str) -> None:
    from tito_audit.audit.runner import audit_model

    model = _model()
    report = audit_model(model.with_template((HOSTILE / f"{name}.jinja").read_text(), name))
    assert (report.verdict, report.error_kind) == ("error", "limit_exceeded"), report.error
    assert report.error is not None and "per-template budget" in report.error and "\n" not in report.error


@pytest.mark.slow
def test_every_hostile_template_ends_in_audit() -> None:
    """The whole hostile set, one audit each: every template ends with a verdict or a classified error."""
    from tito_audit.audit.runner import audit_model
    from tito_audit.errors import AuditError
    from tito_audit.sources.load import compile_template

    model = _model()
    ended = {}
    for path in sorted(HOSTILE.glob("*.jinja")):
        try:
            compile_template(path.name, path.read_text())  # as the loader does for `audit --chat-template`
            report = audit_model(model.with_template(path.read_text(), path.name))
            ended[path.stem] = report.error_kind or report.verdict
        except AuditError as err:  # does not compile
            ended[path.stem] = err.kind
    assert len(ended) == len(list(HOSTILE.glob("*.jinja")))
    assert all(ended[n] == "limit_exceeded" for n in CPU_BURNERS), ended


@pytest.mark.slow
def test_cli_stops_the_burning_model_and_audits_the_others(tmp_path: Path) -> None:
    """A local copy of a bundled model with cpuloop.jinja as its template beside a good model: one line, exit 2,
    and the good model's verdict."""
    from tito_audit.sources.bundled import BundledSource

    folder = tmp_path / "burner"
    shutil.copytree(BundledSource().fetch("qwen3-0.6b").folder, folder)
    (folder / "chat_template.jinja").write_text((HOSTILE / "cpuloop.jinja").read_text())
    done = subprocess.run(
        [sys.executable, "-m", "tito_audit", "audit", str(folder), "qwen2.5-7b-instruct", "--quiet", "--jobs", "2"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert done.returncode == 2
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "per-template budget" in errors[0] and "Traceback" not in done.stderr
    assert "qwen2.5-7b-instruct  SAFE" in done.stdout


def test_the_budget_counts_the_output_the_renders_produce() -> None:
    """A render's output is tokenized and compared after the render: a template that renders a megabyte in 20 ms
    held an audit for 70-97 s and 3 GB before its render CPU was spent (red team B1). The output counts too."""
    out = TemplateBudget(cpu_seconds=3.0, limit_hits=2, output_chars=1_000_000)
    out.charge(0.02, False, 600_000)
    assert out.stopped is None
    out.charge(0.02, False, 600_000)
    assert out.stopped is not None and "characters" in out.stopped
    assert AUDIT_LIMITS.template_output_chars and not REPLAY_LIMITS.template_output_chars  # replay: none


@pytest.mark.slow
def test_a_template_that_floods_its_output_is_stopped_by_its_output() -> None:
    """token_flood.jinja renders ~1.1 MB per render in ~0.02 s of CPU: the output total stops it, not the 3 s of
    render CPU after minutes of tokenizing."""
    from tito_audit.audit.runner import audit_model

    report = audit_model(_model().with_template((HOSTILE / "token_flood.jinja").read_text(), "token_flood"))
    assert (report.verdict, report.error_kind) == ("error", "limit_exceeded"), report.error
    assert report.error is not None and "characters" in report.error
