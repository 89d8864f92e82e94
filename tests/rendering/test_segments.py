"""Segment-cached encoding gives exactly the ids and offsets of encoding the whole text, on real tokenizers."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer

from tests.conftest import SHARED_MODELS
from tito_audit.audit.context import AuditContext, AuditOptions
from tito_audit.rendering.segments import SegmentedEncoder
from tito_audit.rendering.tokenizer_cache import tokenizer_cache
from tito_audit.sources import bundled_names

MODELS = SHARED_MODELS + bundled_names()


def _whole(backend: Tokenizer, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    enc = backend.encode(text, add_special_tokens=False)
    return list(enc.ids), list(enc.offsets)


@pytest.mark.parametrize("spec", MODELS)
def test_every_render_of_an_audit_encodes_as_a_whole(loaded, spec):
    """Every text the quick scenarios render with the model's own template, cut at its control tokens."""
    model = loaded(spec)
    backend = model.tokenizer._tokenizer
    seg = SegmentedEncoder(backend)
    assert seg.usable
    ctx = AuditContext(model, AuditOptions(scenarios="quick"))
    assert any(sim.ok for sim in ctx.simulations)
    texts = [t for t in ctx.renderer._shared.texts.values() if isinstance(t, str)]
    cut = [t for t in texts if len(seg.segments(t)) > 2]
    assert len(cut) >= 10  # real multi-turn renders, cut in several places
    for text in texts:
        whole = _whole(backend, text)
        assert seg.encode(text) == whole, text[:200]
        for start, end in [(0, 0), (len(text) // 3, len(text) // 2), (len(text) - 1, len(text))]:
            _assert_window(seg.window(text, start, end), whole, start, end)


def _assert_window(window, whole, start, end):
    """A contiguous run of the whole encoding that holds every token overlapping [start, end]."""
    ids, offsets = window
    at = next((i for i in range(len(whole[1]) + 1) if whole[1][i : i + len(offsets)] == offsets), None)
    assert at is not None and whole[0][at : at + len(ids)] == ids
    overlapping = [i for i, (a, b) in enumerate(whole[1]) if a <= end and b >= start and b > a]
    assert all(at <= i < at + len(ids) for i in overlapping)


@pytest.mark.parametrize("spec", ["Qwen/Qwen3-0.6B", "microsoft/Phi-3-mini-4k-instruct", "google/gemma-2-2b-it"])
def test_the_audit_cache_uses_segments_and_agrees_with_transformers(loaded, spec):
    model = loaded(spec)
    tok = model.tokenizer
    cache = tokenizer_cache(tok)
    text = "".join(f'<|user|>\n turn {i} é 日本 {{"a": [1, 2]}}\n' + tok.eos_token for i in range(40))
    assert cache.encode(text) == tok.encode(text, add_special_tokens=False)
    ids, offsets = cache.encode_with_offsets(text)
    out = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    assert (ids, offsets) == (out["input_ids"], [tuple(o) for o in out["offset_mapping"]])
    assert cache._segments is not None and cache._segments.usable
    short = "hi" + tok.eos_token + "\n ok"  # short texts are encoded by segments too, and kept as segments
    assert cache.encode(short) == tok.encode(short, add_special_tokens=False)
    assert all(piece in cache._segments._pieces for piece in cache._segments.segments(short))
    assert cache.encode_with_offsets(short)[0] == tok.encode(short, add_special_tokens=False)


_PIECES = ["hello", " world", "\n", "\n\n", "  ", "\t", "é", "e\u0301", "日本語", "😀", '{"a": 1}', "<think>", "▁"]


@pytest.mark.parametrize("spec", ["Qwen/Qwen3-0.6B", "meta-llama/Llama-3.2-3B-Instruct", "google/gemma-2-2b-it"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_texts_encode_as_a_whole(loaded, spec, data):
    backend = loaded(spec).tokenizer._tokenizer
    added = sorted(t.content for t in backend.get_added_tokens_decoder().values())
    pieces = st.sampled_from(_PIECES + added[:40] + added[-10:]) | st.text(max_size=12)
    text = "".join(data.draw(st.lists(pieces, max_size=60)))
    seg, whole = SegmentedEncoder(backend), _whole(backend, text)
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    _assert_window(seg.window(text, start, end), whole, start, end)  # only the segments there are encoded
    assert seg.ids(text) == whole[0]  # the others without their offsets
    assert seg.encode(text) == whole  # which are encoded again where asked for
    assert seg.ids(text) == whole[0]


def _with_token(loaded, token: AddedToken) -> Tokenizer:
    backend = Tokenizer.from_str(loaded("Qwen/Qwen3-0.6B").tokenizer._tokenizer.to_str())
    backend.add_special_tokens([token])
    return backend


def test_a_token_that_strips_left_is_never_a_cut(loaded):
    """Cutting before an lstrip token would hand its whitespace to the wrong segment."""
    backend = _with_token(loaded, AddedToken("<tool>", lstrip=True, normalized=False, special=True))
    text = "result:   <tool>x<|im_end|>\nok   <tool>"
    seg = SegmentedEncoder(backend)
    assert "<tool>" not in seg._cuts and "<|im_end|>" in seg._cuts
    assert seg.encode(text) == _whole(backend, text)
    naive = backend.encode_batch(["result:   ", "<tool>x"], add_special_tokens=False)
    assert [i for e in naive for i in e.ids] != _whole(backend, "result:   <tool>x")[0]


def test_a_single_word_token_turns_segmenting_off(loaded):
    backend = _with_token(loaded, AddedToken("tool", single_word=True, normalized=False, special=True))
    assert not SegmentedEncoder(backend).usable
