"""The speed-ups change nothing: cached and reconstructed results equal what transformers and difflib compute."""

from __future__ import annotations

import datetime as dt
import difflib
from functools import partial

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import tito_audit.report.align as align_module
from tests.conftest import CORPUS, SHARED_MODELS, needs_corpus
from tito_audit.audit.context import AuditContext, AuditOptions
from tito_audit.rendering import Renderer, RenderError
from tito_audit.rendering.clock import pinned_date
from tito_audit.rendering.tokenizer_cache import TokenizerCache, tokenizer_cache
from tito_audit.report.align import IdMatcher, count_unmatched_trainable


def _reference_ids(tok, template, messages, tools, agp, kwargs):
    """What apply_chat_template itself gives (Renderer.render_ids falls back to plain encoding where it fails)."""
    try:
        return list(
            tok.apply_chat_template(
                messages,
                tools=tools,
                chat_template=template,
                add_generation_prompt=agp,
                tokenize=True,
                return_dict=False,
                sanitize_control_tokens=True,
                **kwargs,
            )
        )
    except (TypeError, ValueError):
        text = tok.apply_chat_template(
            messages, tools=tools, chat_template=template, add_generation_prompt=agp, tokenize=False, **kwargs
        )
        return list(tok.encode(text, add_special_tokens=False))


@pytest.mark.parametrize("model", SHARED_MODELS)
def test_render_ids_equal_transformers_sanitized_encoding(model, loaded) -> None:
    """Every scenario prefix an audit renders, in every thinking mode: the same ids as transformers'
    ``sanitize_control_tokens=True`` (control-token text in content included)."""
    m = loaded(model)
    ctx = AuditContext(m, AuditOptions())
    compared = sanitized = 0
    for scenario in ctx.scenarios:
        renderer = Renderer(m.tokenizer, m.chat_template, scenario.kwargs)
        messages, tools = scenario.messages_list(), list(scenario.tools)
        for end in range(1, len(messages) + 1):
            agp = messages[end - 1]["role"] != "assistant"
            try:
                ours = renderer.render_ids(messages[:end], tools=tools, add_generation_prompt=agp)
            except RenderError:
                continue
            with pinned_date(renderer.date):
                ref = _reference_ids(m.tokenizer, m.chat_template, messages[:end], tools, agp, scenario.kwargs)
            assert ours == ref, (scenario.id, end)
            compared += 1
            sanitized += "special_text" in scenario.tags
    assert compared > 60 and sanitized > 3


@pytest.mark.parametrize("model", ["Qwen/Qwen3-0.6B", "openai/gpt-oss-20b", "mistralai/Mistral-Nemo-Instruct-2407"])
def test_render_ids_with_control_text_in_content_equal_transformers(model, loaded) -> None:
    """Special tokens, non-special added tokens (Qwen3's ``<think>``), the private markers sanitizing uses, and
    a token split by a marker, in user and tool content and in a tool description."""
    m = loaded(model)
    tok = m.tokenizer
    added = sorted(tok.added_tokens_encoder, key=len, reverse=True)
    special = next(t for t in added if t in tok.all_special_tokens)
    plain_added = [t for t in added if t not in tok.all_special_tokens][:2]
    marker = "\U000f0000"
    contents = [
        f"echo {special} now",
        " ".join(plain_added) or "no plain added tokens",
        f"{special[:3]}{marker}{special[3:]} and {marker}",
        f"{special}{' '.join(plain_added)}{special}",
    ]
    tools = [{"type": "function", "function": {"name": "f", "description": f"uses {special}", "parameters": {}}}]
    renderer = Renderer(tok, m.chat_template)
    for text in contents:
        for tool_list in (None, tools):
            messages = [{"role": "user", "content": text}, {"role": "assistant", "content": f"ok {text}"}]
            for end, agp in ((1, True), (2, False)):
                try:
                    ours = renderer.render_ids(messages[:end], tools=tool_list, add_generation_prompt=agp)
                except RenderError:
                    continue
                with pinned_date(renderer.date):
                    ref = _reference_ids(tok, m.chat_template, messages[:end], tool_list, agp, {})
                assert ours == ref, (text, end, tool_list is not None)


@pytest.mark.parametrize("model", SHARED_MODELS)
def test_tokenizer_cache_matches_the_tokenizer(model, loaded) -> None:
    """Encodes go straight to the Rust tokenizer when that is what transformers would call: same ids, offsets,
    decodes."""
    m = loaded(model)
    tok, cache = m.tokenizer, tokenizer_cache(m.tokenizer)
    assert cache._backend(None) is not None  # the direct path is the one under test
    texts = ["Hello  world", "東京の天気は？ 🌴", "<|im_start|>user\n<think>x</think><|im_end|>", " \n\n\t"]
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False)
        assert cache.encode(text) == ids and cache.encode(text) == ids  # miss, then hit
        assert cache.encode_with_offsets(text)[0] == ids
        for kwargs in ({}, {"skip_special_tokens": True}, {"clean_up_tokenization_spaces": False}):
            assert cache.decode(ids, **kwargs) == tok.decode(ids, **kwargs)
        assert [cache.piece(i) for i in ids] == [tok.decode([i], clean_up_tokenization_spaces=False) for i in ids]
        for skip in (False, True):
            seqs = [ids, ids[:3], ids[::-1], []]
            expect = [tok.decode(x, skip_special_tokens=skip, clean_up_tokenization_spaces=False) for x in seqs]
            assert cache.decode_many(seqs, skip_special_tokens=skip, clean_up_tokenization_spaces=False) == expect
    long = tok.encode("row 0001: temperature=10\n" * 400, add_special_tokens=False)
    assert cache.decode(long) == tok.decode(long)  # past the decode-cache length: decoded each time
    vocab = tok.get_vocab()
    probes = [
        *list(tok.added_tokens_encoder)[:20],
        "Hello",
        "\u0120world",
        "zz_not_a_token",
        *list(vocab)[:: len(vocab) // 50],
    ]
    assert [cache.vocab.get(t) for t in probes] == [vocab.get(t) for t in probes]  # one-token lookups
    assert cache.vocab == vocab


def test_backend_state_transformers_would_reset_sends_encodes_through_transformers() -> None:
    from tito_audit.sources.load import load

    tok = load("qwen2.5-7b-instruct").tokenizer  # a private copy: this test changes it
    cache = tokenizer_cache(tok)
    tok._tokenizer.enable_truncation(8)  # transformers turns it off for an untruncated encode; we must not skip that
    text = "A sentence long enough to be cut after eight tokens by the backend's own truncation."
    assert cache._backend(None) is None
    assert cache.encode(text) == tok.encode(text, add_special_tokens=False) and len(cache.encode(text)) > 8
    assert cache._backend(None) is not None  # transformers reset it; from now on the direct path is exact again


def test_cache_is_rebuilt_when_the_tokenizer_gains_tokens() -> None:
    from tito_audit.sources.load import load

    tok = load("qwen2.5-7b-instruct").tokenizer  # a private copy: this test changes it
    before = tokenizer_cache(tok)
    assert before.encode("zqxw_tokenish") == tok.encode("zqxw_tokenish", add_special_tokens=False)
    tok.add_tokens(["zqxw_tokenish"])
    after = tokenizer_cache(tok)
    assert after is not before and after.encode("zqxw_tokenish") == [tok.convert_tokens_to_ids("zqxw_tokenish")]


def test_derived_renderers_share_caches_but_not_kwargs(loaded) -> None:
    m = loaded("Qwen/Qwen3-0.6B")
    r = Renderer(m.tokenizer, m.chat_template)
    msgs = [{"role": "user", "content": "Hi"}]
    off = r.with_kwargs(enable_thinking=False)
    assert off is r.with_kwargs(enable_thinking=False)  # memoized
    assert off.render(msgs, add_generation_prompt=True) != r.render(msgs, add_generation_prompt=True)
    assert off.render(msgs, add_generation_prompt=True) == m.tokenizer.apply_chat_template(
        msgs, chat_template=m.chat_template, add_generation_prompt=True, tokenize=False, enable_thinking=False
    )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 3), max_size=120),
    st.lists(st.integers(0, 3), max_size=120),
)
def test_id_matcher_finds_difflibs_blocks(a, b) -> None:
    ref = difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()
    old = align_module._NUMPY_CELLS
    align_module._NUMPY_CELLS = 0  # the vectorized search on every range, however small
    try:
        assert IdMatcher(a, b).get_matching_blocks() == ref
    finally:
        align_module._NUMPY_CELLS = old


def test_id_matcher_on_real_buffers(loaded) -> None:
    """Buffer vs naive re-render of real episodes, long ones included: the same alignment as difflib."""
    m = loaded("Qwen/Qwen3-0.6B")
    ctx = AuditContext(m, AuditOptions())
    pairs = [(s.trajectory.input_ids, s.naive_ids, s.trajectory.loss_mask) for s in ctx.ok_simulations()]
    pairs = [p for p in pairs if p[0] != p[1]]
    assert pairs and max(len(p[0]) * len(p[1]) for p in pairs) >= align_module._NUMPY_CELLS
    for expected, actual, mask in pairs:
        ref = difflib.SequenceMatcher(None, expected, actual, autojunk=False).get_matching_blocks()
        assert IdMatcher(expected, actual).get_matching_blocks() == ref
        matched = {i for blk in ref for i in range(blk.a, blk.a + blk.size)}
        assert count_unmatched_trainable(expected, actual, mask) == sum(
            1 for i, t in enumerate(mask) if t and i not in matched
        )


def test_caches_do_not_keep_a_tokenizer_alive() -> None:
    """`tito-audit audit A B C` loads one tokenizer after another in a process: each must be freed after its
    audit, caches included."""
    import gc
    import weakref

    from tito_audit import audit_model
    from tito_audit.sources.load import load

    model = load("phi-3-mini-4k-instruct")
    audit_model(model, AuditOptions(scenarios="quick"))
    alive = weakref.ref(model.tokenizer)
    del model
    gc.collect()
    assert alive() is None


def test_tools_are_dropped_only_for_templates_that_never_read_them(loaded) -> None:
    m = loaded("Qwen/Qwen2.5-7B-Instruct")
    tools = [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}]
    msgs = [{"role": "user", "content": "Hi"}]
    no_tools = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    with_tools = "{% if tools %}TOOLS {{ tools | tojson }}\n{% endif %}" + no_tools
    for template, reads in ((no_tools, False), (with_tools, True)):
        r = Renderer(m.tokenizer, template)
        ref = m.tokenizer.apply_chat_template(msgs, tools=tools, chat_template=template, tokenize=False)
        assert r.render(msgs, tools=tools) == ref and r._shared.reads_tools is reads
        assert r.render_ids(msgs, tools=tools) == m.tokenizer.encode(ref, add_special_tokens=False)
    assert Renderer(m.tokenizer, with_tools).render(msgs, tools=tools) != Renderer(m.tokenizer, with_tools).render(msgs)


def test_renders_at_another_date_run_the_template_again_only_where_it_reads_the_clock(loaded, monkeypatch) -> None:
    """A template sees the date only through ``strftime_now``: one that never loads it gets the cached render at
    another date (no template run), one that does is run at each date and renders each as transformers does."""
    import tito_audit.rendering.renderer as renderer_module

    m = loaded("Qwen/Qwen2.5-7B-Instruct")
    msgs = [{"role": "user", "content": "Hi"}]
    runs: list[str] = []
    render_text = renderer_module.render_text

    def counted(tokenizer, template, *args, **kwargs):  # type: ignore[no-untyped-def]
        runs.append(template)
        return render_text(tokenizer, template, *args, **kwargs)

    monkeypatch.setattr(renderer_module, "render_text", counted)
    no_clock = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    # the name loaded only in an arm no render takes: loading it, not calling it, is what counts
    clock = "{% if false %}{{ strftime_now('%d') }}{% endif %}Today: {{ strftime_now('%Y-%m-%d') }}\n" + no_clock
    later = dt.datetime(1999, 12, 31, 23, 59)
    for template, reads in ((no_clock, False), (clock, True)):
        r = Renderer(m.tokenizer, template)
        texts = [r.render(msgs), r.with_date(later).render(msgs)]
        assert r._shared.reads_clock is reads
        assert len(runs) == (2 if reads else 1)
        for text, when in zip(texts, (r.date, later), strict=True):
            with pinned_date(when):
                assert text == m.tokenizer.apply_chat_template(msgs, chat_template=template, tokenize=False)
        assert (texts[0] != texts[1]) is reads
        assert r.with_date(later).render_ids(msgs) == m.tokenizer.encode(texts[1], add_special_tokens=False)
        runs.clear()


def test_render_cache_keys_tell_apart_values_json_or_equality_would_confuse(loaded) -> None:
    """The render cache is keyed by ``marshal``: True, 1, 1.0, "1", a tuple and a list each get their own render
    (``True == 1 == 1.0``), and values marshal cannot write (a str subclass, a date) fall back to ``repr`` keys."""
    import datetime as dt

    m = loaded("Qwen/Qwen2.5-7B-Instruct")
    template = "{% for m in messages %}[{{ m.content }}|{{ m.content is string }}]{% endfor %}"

    class Tag(str):
        pass

    values = [True, 1, 1.0, "1", (1, 2), [1, 2], Tag("1"), dt.date(2026, 1, 1), {"a": True}, {"a": 1}]
    renderer = Renderer(m.tokenizer, template)
    for value in values * 2:  # the second round is served from the cache
        messages = [{"role": "user", "content": value}]
        ref = m.tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False)
        assert renderer.render(messages) == ref, value
    assert len(renderer._shared.texts) == len(values)


_ADDED = ["<|im_end|>", "<tool_call>", "\U000f0000"]
_json_like = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(alphabet="ab<|>_")
    | st.sampled_from(_ADDED),
    lambda children: (
        st.lists(children, max_size=3)
        | st.tuples(children)
        | st.dictionaries(st.sampled_from(["role", "content", "x"]), children, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_json_like, max_size=4))
def test_mention_answers_kept_per_value_equal_walking_the_values(values) -> None:
    """``any_mentions_added_tokens`` (answers kept by each value's marshalled content) answers as walking them all,
    asked twice (the second time from the memo)."""
    from tito_audit.sources.load import load

    cache = tokenizer_cache(_mention_tokenizer(load))
    expected = cache.mentions_added_tokens(list(values))
    assert cache.any_mentions_added_tokens(values) is expected
    assert cache.any_mentions_added_tokens(values) is expected


def _mention_tokenizer(load):
    """Qwen2.5 (``<|im_end|>`` and ``<tool_call>`` are added tokens), loaded once for the whole fuzz run."""
    if not hasattr(_mention_tokenizer, "tok"):
        _mention_tokenizer.tok = load("qwen2.5-7b-instruct").tokenizer
    return _mention_tokenizer.tok


@settings(max_examples=200, deadline=None)
@given(_json_like, _json_like)
def test_content_keys_are_equal_exactly_for_equal_values_of_equal_types(a, b) -> None:
    """``content_key``: the same bytes for two separately built copies of one value, different bytes as soon as
    a value or a type differs (True, 1 and 1.0 compare equal in Python; tuples and lists, too, once listed)."""
    import copy
    import marshal

    from tito_audit.rendering.bounded_cache import content_key

    assert content_key(a) == content_key(copy.deepcopy(a)) and marshal.loads(content_key(a)) == a
    same = repr(a) == repr(b)  # repr shows every type these values can have (1 vs 1.0 vs True, () vs [])
    assert (content_key(a) == content_key(b)) is same


def test_prepared_templates_render_as_transformers_renders_them_unprepared(loaded) -> None:
    """``prepare_for_renders`` flattens a template's globals and memoizes its ``tojson``: the renders stay those of
    the template as transformers compiles it (here the same text plus a comment, which no renderer prepares).
    Values equal in Python but of different types (True, 1, 1.0; a tuple and a list) each get their own JSON; the
    tool schemas, written in every render, and each content, written for the user and the assistant, come from the
    memo after their first writing; a value tojson cannot write raises as it does unprepared."""
    from tito_audit.rendering.analysis import compiled_template

    m = loaded("Qwen/Qwen2.5-7B-Instruct")
    template = (
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
        "{{ m.content | tojson }}|{{ m.content | tojson(indent=2, sort_keys=true) }}|{{ range(ns.n) | list }}|"
        "{{ dict(k=ns.n) | tojson(separators=(',', ':')) }}|{{ raise_exception is defined }};{% endfor %}"
        "{{ tools | tojson }}"
    )
    unprepared = template + "{# compiled by transformers alone #}"
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    renderer = Renderer(m.tokenizer, template)
    assert getattr(compiled_template(template).environment.filters["tojson"], "memoized", False)
    values = [True, 1, 1.0, "1", "é <|im_end|>", (1, 2), [1, 2], {"b": True, "a": 1}, {"b": 1, "a": 1}, {}]
    for value in values * 2:
        messages = [{"role": "user", "content": value}, {"role": "assistant", "content": value}]
        ref = m.tokenizer.apply_chat_template(messages, tools=tools, chat_template=unprepared, tokenize=False)
        assert renderer.render(messages, tools=tools) == ref, value
    with pytest.raises(TypeError):
        m.tokenizer.apply_chat_template([{"role": "user"}], chat_template=unprepared, tokenize=False)
    with pytest.raises(RenderError):
        renderer.render([{"role": "user"}])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_json_like, st.sampled_from([{}, {"indent": 2}, {"sort_keys": True}]))))
@example([(True, {}), (1, {}), (1.0, {}), ([True], {}), ([1], {"indent": 2}), ([1], {})])
def test_memoized_tojson_writes_what_tojson_writes(calls) -> None:
    """Every call answered as transformers' ``tojson`` answers it, whatever was asked before (a memo keyed loosely
    would answer 1 with the JSON of True)."""
    from transformers.utils.chat_template_utils import _cached_compile_jinja_template

    from tito_audit.rendering.analysis import _memoized_tojson

    tojson = _cached_compile_jinja_template("x").environment.filters["tojson"]
    memoized = _memoized_tojson(tojson)
    for value, kwargs in calls * 2:
        assert memoized(value, **kwargs) == tojson(value, **kwargs)


def test_a_renderer_outliving_transformers_compile_cache_still_renders_its_prepared_template(loaded) -> None:
    """transformers keeps 128 compiled templates; one dropped and compiled anew is unprepared (the real clock, a
    sandbox that answers unsafe access with a silent undefined). A renderer made before prepares it again: the
    pinned date and the refusal survive the template leaving transformers' cache."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    from tito_audit.rendering.clock import DEFAULT_DATE

    m = loaded("Qwen/Qwen3-0.6B")
    template = (
        "{{ strftime_now('%Y-%m-%d') }}|{% if messages[0].content == 'probe' %}{{ messages.__class__ }}{% endif %}"
    )
    renderer = Renderer(m.tokenizer, template)
    pinned = DEFAULT_DATE.strftime("%Y-%m-%d") + "|"
    assert renderer.render([{"role": "user", "content": "hi"}]) == pinned
    _compile_jinja_template.cache_clear()  # what 128 other templates compiled after this one do
    assert renderer.with_kwargs(x=1).render([{"role": "user", "content": "hi"}]) == pinned
    with pytest.raises(RenderError) as refused:
        renderer.render([{"role": "user", "content": "probe"}])
    assert refused.value.kind == "security"


def test_kept_encodings_are_never_walked_by_the_garbage_collector(loaded) -> None:
    """A scan keeps tens of thousands of encodings per tokenizer and worker. Kept as lists of ints, every
    collection of the old generation walked each id of each one (about a tenth of the scan's CPU); kept as
    tuples of ints, the collector stops tracking them. Callers still get lists of their own."""
    import gc

    m = loaded("Qwen/Qwen2.5-7B-Instruct")
    cache = TokenizerCache(m.tokenizer)  # its own: entries an earlier test kept may have been frozen since
    renderer = Renderer(m.tokenizer, m.chat_template)
    short, long = "Hello there", "<|im_start|>user\n" + "a fairly long line of text\n" * 25
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    ids = cache.encode(short)
    for text in (short, long):
        cache.encode_with_offsets(text)
        cache.encode(text)
    renderer.render_ids(msgs, add_generation_prompt=True)
    for _ in range(3):  # a tuple is untracked in a collection after its items are: one nesting level per collection
        gc.collect()
    kept = [
        *cache._encodes.values(),
        *cache._offsets.values(),
        *cache._segments._pieces.values(),
        *renderer._shared.ids.values(),
    ]
    assert len(kept) >= 6 and not any(gc.is_tracked(value) for value in kept)
    ids.append(-1)  # a caller's list is its own
    assert cache.encode(short) == m.tokenizer.encode(short, add_special_tokens=False)


@needs_corpus
def test_templates_compiled_without_the_optimizer_render_as_transformers_compiles_them(loaded, monkeypatch) -> None:
    """``compiled_template`` compiles with jinja's optimizer off. A fourth of the corpus renders every prefix of a
    tool conversation, with and without a generation prompt, exactly as transformers' own compile of the same text
    (optimizer on, the clock pinned alike) renders it, or both refuse it."""
    from transformers.utils import chat_template_utils as ctu

    from tito_audit.rendering.analysis import compiled_template
    from tito_audit.rendering.clock import pinned_strftime

    tok = loaded("Qwen/Qwen2.5-7B-Instruct").tokenizer
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "get_weather", "content": "Sunny, 21 C."},
        {"role": "assistant", "content": "Sunny."},
    ]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    asks = [(end, agp) for end in range(1, len(messages) + 1) for agp in (False, True)]

    def rendered(render) -> list[str | None]:
        out: list[str | None] = []
        for end, agp in asks:
            try:
                out.append(render(messages[:end], tools=tools, add_generation_prompt=agp))
            except Exception:
                out.append(None)
        return out

    ours: dict[str, list[str | None]] = {}
    for path in sorted(CORPUS.glob("*.jinja"))[::4]:
        text = path.read_text(encoding="utf-8")
        if _compiles(text):
            assert compiled_template(text).environment.optimized is False
            ours[text] = rendered(Renderer(tok, text).render)

    fresh: dict[str, object] = {}

    def transformers_compile(text: str):  # transformers' compile, not its cache (which holds ours)
        if text not in fresh:
            compiled = fresh[text] = ctu._cached_compile_jinja_template(text)
            compiled.environment.globals["strftime_now"] = pinned_strftime
            assert compiled.environment.optimized is True
        return fresh[text]

    monkeypatch.setattr(ctu, "_compile_jinja_template", transformers_compile)
    equal = refused = 0
    for text, mine in ours.items():
        reference = rendered(partial(tok.apply_chat_template, chat_template=text, tokenize=False))
        assert mine == reference, text[:200]
        equal += sum(r is not None for r in mine)
        refused += sum(r is None for r in mine)
    assert equal > 1000 and refused > 50


def _compiles(text: str) -> bool:
    from tito_audit.rendering.analysis import compiled_template

    try:
        compiled_template(text)
    except Exception:
        return False
    return True


@pytest.mark.parametrize("model", ["meta-llama/Llama-3.2-3B-Instruct", "deepseek-ai/DeepSeek-V3"])
def test_an_audit_leaves_no_reference_cycles_of_its_own(loaded, model) -> None:
    """Kept errors carry no traceback and derived renderers are held weakly, so an audit's renderers, caches,
    simulations and buffers are freed as soon as it is dropped, not left for the garbage collector to walk
    generation by generation (jinja's own contexts and macros still make cycles of their own)."""
    import gc

    from tito_audit import audit_model

    m = loaded(model)
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        report = audit_model(m, AuditOptions(scenarios="quick"))
        assert report.error is None and report.checks
        del report
        gc.collect()
        ours = {type(o).__name__ for o in gc.garbage if type(o).__module__.startswith("tito_audit")}
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    # a compiled template and its jinja environment (``_ReadingEnvironment``, the class transformers compiled it
    # with) refer to each other by jinja's design, and the memo of its ``tojson`` lives and dies with them
    assert ours - {"BoundedCache", "_ReadingEnvironment"} == set()


def test_a_trial_render_is_neither_cached_nor_counted_by_template_coverage(loaded) -> None:
    """``render_trial`` (the search's test of whether a template accepts a piece of a sweep) renders what ``render``
    renders, but leaves no render for coverage's replay and no cached text: a refused candidate's arms must not count
    as taken by a conversation played (on 7b34281 they cleared a ``not_probed:template_line`` reason)."""
    m = loaded("qwen2.5-7b-instruct")
    renderer = Renderer(m.tokenizer, m.chat_template)
    messages = [{"role": "user", "content": "Hello"}]
    trial = renderer.render_trial(messages, None, True)
    assert renderer._shared.untraced == [] and renderer._shared.texts == {}
    assert trial == renderer.render(messages, add_generation_prompt=True)
    assert len(renderer._shared.untraced) == 1 and len(renderer._shared.texts) == 1
