"""The sanitizer's encode of a marked render is transformers' ``encode_marked_chat`` over the whole added-token
table, with the table cut to the tokens the text holds between markers (``EncodeView.for_text``)."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tito_audit import compat
from tito_audit.rendering.sanitizer import EncodeView
from tito_audit.rendering.tokenizer_cache import tokenizer_cache

MODEL = "Qwen/Qwen3-0.6B"


@pytest.fixture(scope="module")
def marking():
    pieces = compat.pieces("control_token_marking")
    if pieces is None:
        pytest.skip("this transformers has no control-token marking")
    return pieces


def _pieces(tokenizer, markers):
    """Texts as a marked render holds them: added tokens, marked or bare, lone and adjacent markers, plain text, and
    text between markers that is no token."""
    start, end = markers
    tokens = sorted(tokenizer.added_tokens_encoder)
    token = st.sampled_from(tokens)
    return st.one_of(
        token,
        token.map(lambda t: start + t + end),
        st.sampled_from([start, end, start + end, end + start, start + "<think" + end, "\n", " ", "x<"]),
        st.text(alphabet="ab <|>_\n", max_size=6),
        st.text(max_size=4),
    )


@given(data=st.data())
@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@example(data=None)
def test_encode_for_text_equals_the_whole_table(loaded, marking, data) -> None:
    tokenizer = loaded(MODEL).tokenizer
    view = EncodeView(tokenizer, tokenizer_cache(tokenizer))
    start, end = marking.markers
    if data is None:  # a render as the marked control_marking scenarios give: marked think tags, a lone marker
        text = f"<|im_start|>assistant\n{start}<think>{end}a{start}</think>{end}\n{start}x{end}{start}<|im_end|>"
    else:
        text = "".join(data.draw(st.lists(_pieces(tokenizer, marking.markers), max_size=8)))
    cut = view.for_text(text, marking.markers)
    assert len(cut.added_tokens_encoder) < len(view.added_tokens_encoder)
    try:
        expected = marking.encode(view, text)
    except ValueError as exc:  # transformers refuses a marked token the plain text turns into: the cut view too
        with pytest.raises(ValueError, match="Can't sanitize"):
            marking.encode(cut, text)
        assert "Can't sanitize" in str(exc)
        return
    assert marking.encode(cut, text) == expected


def test_a_table_with_a_marker_inside_a_token_is_kept_whole(loaded, marking) -> None:
    tokenizer = loaded(MODEL).tokenizer
    view = EncodeView(tokenizer, tokenizer_cache(tokenizer))
    start, end = marking.markers
    view.added_tokens_encoder = {**view.added_tokens_encoder, f"<{end}>": 1}
    assert view.for_text(f"{start}<think>{end}", marking.markers) is view
