"""Properties of the token buffer for random episode content over real templates.

Whatever the content (unicode, CJK, emoji, RTL marks, whitespace runs, control-token text, JSON or dict tool
arguments), the buffer is the concatenation of what was sampled and what was appended, segment by segment;
the loss mask is 1 exactly on sampled ids; logprobs align; every delta is the template's own tail for the
conversation so far; and an append is either done, or refused with a ``BridgeError`` that leaves the buffer
as it was (a ``RenderError`` only where the template rejects the conversation itself).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tito_audit import BridgeError, RenderError, Trajectory
from tito_audit.audit.simulation import derive_turn
from tito_audit.rollout.probes import TOOLS
from tito_audit.rollout.tokens import special_token_strings

MODELS = [
    "Qwen/Qwen2.5-7B-Instruct",
    "mistralai/Mistral-Nemo-Instruct-2407",
    "openai/gpt-oss-20b",
    "Qwen/Qwen3-0.6B",  # refuses some appends: exercises the refusal path
]
# RTL override and mark, Hebrew, Arabic, CJK, emoji (one with a zero-width joiner), whitespace runs.
_SPICE = ["\u202e", "\u200f", "שלום", "مرحبا", "東京の天気", "北京", "🙂", "👩\u200d💻"]
_SPICE += ["\n\n", "\n", "  ", "\t", "\r\n", " "]


def _text(specials: list[str]) -> st.SearchStrategy[str]:
    piece = st.one_of(
        st.text(max_size=12),
        st.sampled_from(_SPICE),
        st.sampled_from(specials or ["<|x|>"]),
        st.sampled_from(['{"a": 1}', "[1, 2]", "{{ x }}", "null", "True"]),
    )
    return st.lists(piece, max_size=5).map("".join)


@st.composite
def episodes(draw: st.DrawFn, specials: list[str]) -> dict[str, Any]:
    text = _text(specials)
    args: dict[str, Any] = {"city": draw(text), "days": draw(st.integers(0, 9)), "metric": draw(st.booleans())}
    call = {
        "id": "call00001",
        "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps(args) if draw(st.booleans()) else args},
    }
    follow = draw(st.sampled_from(["none", "user", "system"]))
    env2 = [] if follow == "none" else [{"role": follow, "content": draw(text) or "ok"}]
    return {
        "user": draw(text) or "hi",
        "call": {
            "role": "assistant",
            "content": draw(st.sampled_from(["", "Checking."])),
            "tool_calls": [call],
            **({"reasoning_content": draw(text) or "Look it up."} if draw(st.booleans()) else {}),
        },
        "env1": [{"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": draw(text)}],
        "final": {"role": "assistant", "content": draw(text) or "Done."},
        "env2": env2,
        "thinking": draw(st.sampled_from([None, True, False])),
        # How the engine returns each turn: whole, in streamed chunks, with junk after the stop, truncated,
        # or with one token sampled as two (non-canonical).
        "delivery": draw(
            st.lists(st.sampled_from(["whole", "chunks", "junk", "truncated", "split"]), min_size=2, max_size=2)
        ),
        "seed": draw(st.integers(0, 2**16)),
    }


def _split_one(tokenizer: Any, ids: list[int]) -> list[int]:
    """``ids`` with the first token that has a two-piece spelling in the vocabulary sampled as those pieces."""
    vocab = tokenizer.get_vocab()
    special = set(tokenizer.all_special_ids)
    for pos, tid in enumerate(ids):
        piece = tokenizer.convert_ids_to_tokens(tid)
        if tid in special or not isinstance(piece, str):
            continue
        for k in range(1, len(piece)):
            if piece[:k] in vocab and piece[k:] in vocab:
                return [*ids[:pos], vocab[piece[:k]], vocab[piece[k:]], *ids[pos + 1 :]]
    return ids


def _check_aligned(traj: Trajectory, pieces: list[tuple[str, list[int], list[float | None]]]) -> None:
    """Buffer == concatenation of the pieces, segment by segment; mask and logprobs follow the piece kinds."""
    assert [t for _, ids, _ in pieces for t in ids] == traj.input_ids
    assert len(traj.input_ids) == len(traj.loss_mask) == len(traj.logprobs)
    segs = [s for s in traj.segments if s.end > s.start]
    assert [(s.kind in ("sampled",), traj.input_ids[s.start : s.end]) for s in segs] == [
        (kind == "sampled", ids) for kind, ids, _ in pieces if ids
    ]
    mask = [int(kind == "sampled") for kind, ids, _ in pieces for _ in ids]
    assert traj.loss_mask == mask
    assert traj.logprobs == [lp for _, _, lps in pieces for lp in lps]
    assert sum(e - s for s, e in traj.sampled_spans()) == sum(mask)


@pytest.mark.parametrize("spec", MODELS)
def test_buffer_is_what_was_sampled_and_appended(spec: str, loaded) -> None:
    model = loaded(spec)
    specials = special_token_strings(model.tokenizer)[:12]

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(episodes(specials))
    def run(ep: dict[str, Any]) -> None:
        kwargs = {} if ep["thinking"] is None else {"enable_thinking": ep["thinking"]}
        traj = Trajectory.from_model(
            model, tools=list(TOOLS), chat_template_kwargs=kwargs, on_truncated="mask", after_stop="drop"
        )
        try:
            prompt = traj.start([{"role": "user", "content": ep["user"]}])
        except RenderError:
            event("template rejects the prompt")
            return  # the template rejects this prompt itself: nothing to buffer
        pieces: list[tuple[str, list[int], list[float | None]]] = [("prompt", prompt, [None] * len(prompt))]
        rng = ep["seed"]
        for turn, (message, env) in enumerate([(ep["call"], ep["env1"]), (ep["final"], ep["env2"])]):
            history = [*traj.messages, message]
            try:
                sampled = derive_turn(traj.renderer, history, len(history) - 1, traj.tools, traj.stop_ids).sampled_ids
            except RenderError:
                event("template rejects the assistant turn")
                return
            delivery = ep["delivery"][turn]
            if delivery == "split":
                sampled = _split_one(model.tokenizer, sampled)
            if delivery == "truncated":
                sampled = sampled[: max(1, len(sampled) // 2)] if sampled[-1] in traj.stop_ids else sampled
            lps = [-((rng + i) % 97) / 10 for i in range(len(sampled))]
            if delivery == "junk":
                chunks = [(sampled + prompt[:3], lps + [-9.0] * min(3, len(prompt)))]
            elif delivery == "chunks" and len(sampled) > 1:
                cut = 1 + rng % (len(sampled) - 1)
                chunks = [(sampled[:cut], lps[:cut]), (sampled[cut:], lps[cut:])]
            else:
                chunks = [(sampled, lps)]
            for ids, chunk_lps in chunks:
                kept = traj.append_sampled(ids, logprobs=chunk_lps, message=message)
                assert kept <= len(ids) and (kept == len(ids) or ids[kept - 1] in traj.stop_ids)
                pieces.append(("sampled", ids[:kept], list(chunk_lps[:kept])))
            _check_aligned(traj, pieces)
            if not env:
                break
            snapshot = (list(traj.input_ids), list(traj.loss_mask), list(traj.logprobs), json.dumps(traj.messages))
            try:
                appended = traj.append_messages(env)
            except BridgeError as exc:
                if exc.inside_turn is not None:  # the stop ends the turn before the message does: no divergence
                    assert f"before token {exc.index} " in exc.reason and exc.before[exc.index - 1] in traj.stop_ids
                    event("refused: a stop inside the turn")
                    return
                assert exc.reason and f"at token {exc.index} " in exc.reason
                assert exc.before[: exc.index] == exc.after[: exc.index]
                assert exc.index >= len(exc.after) or exc.before[exc.index] != exc.after[exc.index]
                assert snapshot == (traj.input_ids, traj.loss_mask, traj.logprobs, json.dumps(traj.messages))
                event(f"refused {'+'.join(m['role'] for m in env)}")
                return
            except RenderError:
                with pytest.raises(RenderError):  # only where the template itself rejects the conversation
                    traj.renderer.render([*traj.messages, *env], tools=traj.tools, add_generation_prompt=True)
                event("template rejects the conversation")
                return
            # Independent of the bridge code: the template's render of the conversation so far ends with the
            # delta, which starts right after the same token that ends the buffer before it (the turn's stop
            # token), and the render agrees with the history's own render up to there.
            bridge = traj.bridges[-1]
            cut = len(appended) - len(bridge.ids)
            closing, delta = appended[:cut], appended[cut:]
            full = traj.renderer.render_ids(traj.messages, tools=traj.tools, add_generation_prompt=True)
            hist = traj.renderer.render_ids(traj.messages[: -len(env)], tools=traj.tools)
            at = len(full) - len(delta)
            assert delta and full[at:] == delta and full[:at] == hist[:at]
            before_delta = traj.input_ids[len(traj.input_ids) - len(delta) - 1]
            assert full[at - 1] == before_delta and before_delta in traj.stop_ids
            assert closing in ([], [before_delta])  # a truncated turn is closed with the template's stop token
            event(f"appended {'+'.join(m['role'] for m in env)}" + (" after a truncated turn" if closing else ""))
            pieces.append(("turn_end", closing, [None] * len(closing)))
            pieces.append(("bridge", list(bridge.ids), [None] * len(bridge.ids)))
            _check_aligned(traj, pieces)
            assert not traj.truncated

    run()
