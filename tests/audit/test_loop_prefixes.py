"""A scenario is rendered as a rollout loop renders it: the prompt before each assistant turn, each assistant turn,
the whole conversation. Before, every prefix was rendered, so a template that refuses a prefix no loop renders (a
system prompt alone: Llama 3.2 with tools, Qwen3.6's "No user query found") had every scenario with a system
message adapted (``adapt:system_into_user``: "the rollout code must use it too"), advice for a conversation the
loop never sends."""

from __future__ import annotations

from typing import Any

from tests.conftest import DATA, audit_of
from tito_audit.audit.simulation import _first_render_error, renders_in_a_loop
from tito_audit.errors import RenderError

CALLS = [
    {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
    {"type": "function", "function": {"name": "get_time", "arguments": {"city": "Paris"}}},
]
EPISODE: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather and time in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": CALLS},
    {"role": "tool", "content": "Sunny."},
    {"role": "tool", "content": "10:42"},
    {"role": "user", "content": "Thanks."},
    {"role": "assistant", "content": "Sunny, 10:42."},
]


class _Recorder:
    """A renderer that records which prefixes it is asked for, and refuses the ones in ``refused``."""

    def __init__(self, refused: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        self.asked: list[tuple[int, bool]] = []
        self.refused = refused

    def render(self, messages: list[Any], tools: Any = None, add_generation_prompt: bool = False) -> str:
        self.asked.append((len(messages), add_generation_prompt))
        if len(messages) in self.refused:
            raise RenderError("raised", f"refused {len(messages)}")
        return f"<{len(messages)}>"


def test_only_the_prefixes_a_loop_renders_are_rendered() -> None:
    """The system prompt alone, and the first of two results (a block cut inside), are never rendered; the block of
    results and the user turn after them is rendered once, with the generation prompt, as the loop appends it."""
    recorder = _Recorder()
    texts: list[str | None] = []
    assert _first_render_error(recorder, EPISODE, None, texts) is None  # type: ignore[arg-type]
    assert recorder.asked == [(2, True), (3, False), (6, True), (7, False)]
    assert texts == [None, "<2>", "<3>", None, None, "<6>", "<7>"]
    assert [i for i in range(1, len(EPISODE) + 1) if renders_in_a_loop(EPISODE, i)] == [2, 3, 6, 7]


def test_a_refusal_of_a_prefix_no_loop_renders_is_not_the_templates_refusal() -> None:
    assert _first_render_error(_Recorder(refused={1, 4, 5}), EPISODE, None) is None  # type: ignore[arg-type]
    err = _first_render_error(_Recorder(refused={6}), EPISODE, None)  # type: ignore[arg-type]
    assert err is not None and err.message == "refused 6"


def _played_with_their_system_message(report: Any) -> list[str]:
    adapted = report.scenarios.get("adapted", {})
    return [sid for sid in adapted if "system_into_user" in adapted[sid]]


def test_a_template_refusing_a_system_prompt_alone_is_audited_on_the_conversation_as_sent() -> None:
    """ChatML with tools that raises where no user message is there yet (as Qwen3's family does): the scenarios
    that open with a system message play with it; no adaptation is asked of the loop."""
    report = audit_of("qwen3-0.6b", DATA / "templates" / "needs_a_user_message.jinja", search=0)
    assert "adapt:system_into_user" not in report.verdict_reasons, report.verdict_reasons
    assert not _played_with_their_system_message(report)
    assert report.verdict == "safe", report.verdict_reasons


def test_llama_3_2_with_tools_is_not_told_to_fold_its_system_prompt() -> None:
    """Llama 3.2's template raises "Cannot put tools in the first user message when there's no first user
    message!" on a system prompt alone with tools, which no loop renders: its scenarios with a system message were
    all adapted before."""
    report = audit_of("meta-llama/Llama-3.2-3B-Instruct", search=0)
    assert "adapt:system_into_user" not in report.verdict_reasons, report.verdict_reasons
    assert not _played_with_their_system_message(report)
    assert "system_single_call/plain" not in report.scenarios.get("not_applicable", {})
