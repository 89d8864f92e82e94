"""Finding classes come from what differs, structurally, with one rule for the audit and replay (issue 33 item 1).

"think", "reasoning" or "analysis" in an answer or a tool call is content: only the reasoning a conversation
carried, or the template's own reasoning delimiters, make a divergence a history rewrite."""

from __future__ import annotations

from tito_audit import Trajectory, load
from tito_audit.replay.analyze import ReplayContext, analyze
from tito_audit.replay.divergence import classify, run_text
from tito_audit.replay.record import record_from_trajectory
from tito_audit.replay.schema import episode_from_native

MODEL = "qwen2.5-7b-instruct"


def _runs(tok, before: str, after: str) -> tuple[list[int], list[int], tuple[str, str]]:
    """The differing runs of two encoded texts (after their common prefix and suffix), read in place."""
    a, b = tok.encode(before, add_special_tokens=False), tok.encode(after, add_special_tokens=False)
    p = 0
    while p < min(len(a), len(b)) and a[p] == b[p]:
        p += 1
    s = 0
    while s < min(len(a), len(b)) - p and a[-1 - s] == b[-1 - s]:
        s += 1

    def decode(ids):
        return tok.decode(ids)

    texts = (run_text(decode, a, p, len(a) - s), run_text(decode, b, p, len(b) - s))
    return a[p : len(a) - s], b[p : len(b) - s], texts


def test_a_content_word_is_not_reasoning() -> None:
    tok = load(MODEL).tokenizer
    eos = [tok.convert_tokens_to_ids("<|im_end|>")]
    ref, got, texts = _runs(tok, "I think it is  sunny.", "I think it is sunny.")
    assert "think" in texts[0] + texts[1] or "think" in "I think it is sunny."
    assert classify(ref, got, texts=texts, stop_ids=eos) == "whitespace"
    ref, got, texts = _runs(tok, '{"note": "I think so", "reasoning": 1}', '{"note":"I think so","reasoning":1}')
    assert classify(ref, got, texts=texts, stop_ids=eos) == "serialization"


def test_reasoning_the_conversation_carried_is_a_history_rewrite() -> None:
    from tito_audit.report.finding_class import ReasoningMarks, pick_class

    tok = load(MODEL).tokenizer
    eos = [tok.convert_tokens_to_ids("<|im_end|>")]
    marks = ReasoningMarks(("[THINK]", "[/THINK]"), ("The user wants the weather.",))
    dropped = tok.encode("[THINK]\nThe user wants the weather.\n[/THINK]\n\n", add_special_tokens=False)
    text = tok.decode(dropped)
    assert pick_class(dropped, [], texts=(text, ""), stop_ids=eos, reasoning=marks) == "history_rewrite"
    inner = tok.encode(" wants the weather.", add_special_tokens=False)  # a part of it, without delimiters
    assert pick_class(inner, [], texts=(" wants the weather.", ""), stop_ids=eos, reasoning=marks) == (
        "history_rewrite"
    )
    assert pick_class([], [198], texts=("", "\n"), stop_ids=eos, reasoning=marks) == "whitespace"


def test_replay_names_a_content_change_by_what_changed() -> None:
    """A loop that drops the space before "thinking" in an answer: replay says whitespace, not a history rewrite."""
    model = load(MODEL)
    ctx = ReplayContext.from_model(model)
    r = ctx.renderer
    traj = Trajectory(r, ctx.stop_ids)
    messages = [
        {"role": "user", "content": "Will it rain?"},
        {"role": "assistant", "content": "Hmm, thinking: rain."},
    ]
    traj.start(messages[:1])
    traj.append_sampled([*r.encode("Hmm, thinking: rain."), ctx.stop_ids[0]], message=messages[1])
    record = record_from_trajectory(traj, "ep")
    start = traj.sampled_spans()[0][0]
    respaced = [*r.encode("Hmm,thinking: rain."), ctx.stop_ids[0]]
    record["input_ids"] = record["input_ids"][:start] + respaced
    record["loss_mask"] = record["loss_mask"][:start] + [1] * len(respaced)
    res = analyze(episode_from_native(record, 1), ctx)
    assert [d.cls for d in res.divergences] == ["whitespace"], [d.message for d in res.divergences]


def test_a_cut_read_up_to_the_next_turns_stop_is_a_history_rewrite_not_a_stop_seam() -> None:
    """An old result cut short, compared over a window: one run holds the rest of its text, the other the end of the
    turn with its stop token. They differ in content, so the content decides (537c06d called it ``stop_seam``, a
    warning read as the engine's stop, for a template that cuts results once seven messages follow them); runs that
    differ only by a stop token stay a stop seam."""
    from tito_audit.report.finding_class import pick_class

    tok = load(MODEL).tokenizer
    end = tok.convert_tokens_to_ids("<|im_end|>")
    rest = tok.encode(" the forecast for Paris says sunny with a light wind", add_special_tokens=False)
    tail = tok.encode("\n</tool_response>", add_special_tokens=False)
    texts = (tok.decode(rest), tok.decode([*tail, end]))
    assert pick_class(rest, [*tail, end], texts=texts, stop_ids=[end]) == "history_rewrite"
    assert pick_class([*tail, end], tail, texts=(texts[1], tok.decode(tail)), stop_ids=[end]) == "stop_seam"
