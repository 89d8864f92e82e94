"""Hostile templates rendered straight through Renderer: refused, bounded, and classified (never a crash)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from functools import cache

import pytest

from tests.conftest import DATA
from tito_audit.rendering import Renderer, RenderError, RenderLimits
from tito_audit.rendering.analysis import hazards

HOSTILE = DATA / "hostile"
MSGS = [{"role": "user", "content": "Hello"}]


@cache
def _tokenizer():
    from tito_audit.sources.load import load

    return load("qwen3-0.6b").tokenizer


def _render_kind(name: str, limits: RenderLimits | None = None) -> str:
    text = (HOSTILE / f"{name}.jinja").read_text()
    try:
        renderer = Renderer(_tokenizer(), text, limits=limits or RenderLimits(seconds=1.0))
        renderer.render(MSGS, add_generation_prompt=True)
    except RenderError as err:
        return err.kind
    return "ok"


@pytest.mark.parametrize(
    "name",
    [
        "escape_subclasses",
        "escape_cycler_globals",
        "escape_joiner_popen",
        "format_string_runtime",
        "attr_filter",
        "attr_filter_runtime",
    ],
)
def test_sandbox_escapes_raise_security(name: str) -> None:
    assert _render_kind(name) == "security"


def test_runtime_format_string_escape_is_refused_not_silent() -> None:
    # Stock jinja renders a silent empty string here; the hardened sandbox must refuse it.
    with pytest.raises(RenderError) as info:
        Renderer(_tokenizer(), "{% set f = '{0.' ~ '__class__' ~ '}' %}{{ f.format(messages) }}").render(MSGS)
    assert info.value.kind == "security" and "__class__" in info.value.message


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("huge_range", "too_large"),
        ("deep_macro_recursion", "too_large"),
        ("output_flood", "too_large"),
        ("string_repeat_huge", "too_large"),
        ("busy_loop", "timeout"),
    ],
)
def test_runaways_are_stopped(name: str, kind: str) -> None:
    assert _render_kind(name) == kind


def test_limit_does_not_leak_into_next_render() -> None:
    assert _render_kind("string_repeat_huge") == "too_large"
    assert _render_kind("benign_chatml") == "ok"  # the address-space budget was restored


def test_constant_folded_escape_is_caught_statically() -> None:
    text = (HOSTILE / "escape_class_const.jinja").read_text()
    assert _render_kind("escape_class_const") == "ok"  # jinja folded it to a silent undefined at compile time
    assert [h.kind for h in hazards(text)] == ["security"]


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("random_system_line", "nondeterministic"),
        ("reads_date", "reads_date"),
        ("reads_environment", "reads_environment"),
        ("format_string_attack", "security"),
        ("escape_cycler_globals", "security"),
    ],
)
def test_static_hazards(name: str, kind: str) -> None:
    assert kind in {h.kind for h in hazards((HOSTILE / f"{name}.jinja").read_text())}


def test_benign_template_has_no_hazards() -> None:
    assert hazards((HOSTILE / "benign_chatml.jinja").read_text()) == []


def _render_in_a_fresh_process(name: str) -> tuple[str, int]:
    """Render a hostile template once in a fresh process under a 512 MiB render budget: its class and how many MiB
    its peak RSS grew by."""
    code = textwrap.dedent(f"""
        import resource
        from tito_audit.rendering import Renderer, RenderError, RenderLimits
        from tito_audit.sources.load import load
        tok = load("qwen3-0.6b").tokenizer
        text = open({str(HOSTILE / f"{name}.jinja")!r}).read()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            Renderer(tok, text, limits=RenderLimits(seconds=20, memory_bytes=512 << 20)).render(
                [{{"role": "user", "content": "x"}}])
            kind = "ok"
        except RenderError as err:
            kind = err.kind
        print(kind, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    kind, grew_mb = out.stdout.split()
    return kind, int(grew_mb)


@pytest.mark.slow
def test_exponential_growth_is_bounded_in_memory() -> None:
    """A fresh process renders the doubling template; its peak RSS stays near the 512 MiB render budget."""
    kind, grew_mb = _render_in_a_fresh_process("exponential_growth")
    assert kind == "too_large"
    assert grew_mb < 700


@pytest.mark.slow
def test_constant_folding_while_compiling_is_bounded_in_memory() -> None:
    """jinja evaluates ``'ab' * 10**9`` while it compiles: under the compile limits that runs out of its budget,
    jinja leaves the expression to the render, and the render's own limits stop it. Unbounded, the compile alone
    would take two gigabytes (``analysis.COMPILE_LIMITS``)."""
    kind, grew_mb = _render_in_a_fresh_process("compile_time_fold")
    assert kind == "too_large"
    assert grew_mb < 1400


# A first timeout may land in another library's gc callback, which only reports it; the timer fires again.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_compile_past_its_time_limit_is_a_one_line_compile_error(monkeypatch) -> None:
    from tito_audit.errors import TemplateCompileError
    from tito_audit.rendering import analysis
    from tito_audit.sources.load import compile_template

    monkeypatch.setattr(analysis, "COMPILE_LIMITS", RenderLimits(seconds=0.02))  # the compile takes about 0.4 s
    body = "{% for m in messages %}{% if m.role == 'user' %}{{ m.content | trim }}{% endif %}{% endfor %}" * 400
    text = body + "{# compile limit test #}"  # never compiled before in this process
    with pytest.raises(TemplateCompileError, match=r"does not compile: compiling took more than 0\.02s of CPU"):
        compile_template("slow-model", text)
    with pytest.raises(analysis.CompileLimitError):  # remembered: not compiled (and timed out) again
        analysis.compiled_template(text)
    assert hazards(text) == []  # a reading of its code says nothing rather than raise
