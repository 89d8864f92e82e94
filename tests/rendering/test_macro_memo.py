"""Macros of coverage's instrumented copy rendered once per input (rendering/macro_memo.py): the same text as the
template's own render, the same arms counted, and no reuse where a macro reads anything but its inputs."""

from __future__ import annotations

import ast
import functools
from types import SimpleNamespace
from typing import Any

import pytest

from tests.conftest import CORPUS, needs_corpus
from tito_audit import load
from tito_audit.audit.coverage import Coverage
from tito_audit.rendering import RenderLimits
from tito_audit.rendering.analysis import compiled_template, template_code
from tito_audit.rendering.coverage import PROBE, Recorder, TemplateBranches
from tito_audit.rendering.guard import render_limits
from tito_audit.rendering.macro_memo import MEMO, MacroMemo, memoize_macros
from tito_audit.rendering.template_inputs import render_compiled, render_text

TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {"q": {"type": t}}}}}
    for n, t in (("find", "string"), ("count", "integer"))
]
CONVERSATION = [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "yes", "tool_calls": [{"function": {"name": "find", "arguments": {"q": "x"}}}]},
    {"role": "tool", "content": "found"},
    {"role": "assistant", "content": "done"},
]


class Copy:
    """A template's instrumented copy, rendered with a memo (or without) and compared with the plain render."""

    def __init__(self, template: str, memo: bool = True) -> None:
        self.template = template
        self.branches = TemplateBranches(template_code(template), compiled_template(template).debug_info)
        self.copy = self.branches.instrumented(compiled_template(template))
        self.recorder = Recorder()
        self.memo = MacroMemo(self.recorder) if memo else None
        self.tokenizer = _tokenizer()

    def render(self, messages: list[dict[str, Any]], tools: Any = None, **kwargs: Any) -> str:
        """The copy's render, asserted equal to the plain render (a text, or the error both raise)."""
        extra = {PROBE: self.recorder.probe, MEMO: self.memo}
        ours = _outcome(render_compiled, self.copy, self.tokenizer, messages, tools, False, kwargs, extra)
        assert ours == _outcome(render_text, self.tokenizer, self.template, messages, tools, False, kwargs)
        return ours


@functools.cache
def _tokenizer() -> Any:
    return load("qwen3-0.6b").tokenizer


def _outcome(render: Any, *args: Any) -> str:
    """A render's text, or the type and message of what it raised (bounded: corpus templates are untrusted)."""
    try:
        with render_limits(RenderLimits()):
            return str(render(*args))
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def memoized(template: str) -> list[str]:
    return memoize_macros(ast.parse(template_code(template)))


DECLARATIONS = """{%- macro typed(spec) %}{% if spec.type == 'string' %}str{% else %}{{ spec.type }}{% endif %}
{%- endmacro %}
{%- macro declare(tool) %}{% set ns = namespace(n=0) %}{{ tool.function.name }}(
{%- for k, v in tool.function.parameters.properties.items() %}{{ k }}: {{ typed(v) }}{% endfor %}){% endmacro %}
{%- for t in tools or [] %}{{ declare(t) }}
{% endfor %}
{%- for m in messages %}{{ m.role }}: {{ m.content }}
{% endfor %}"""


def test_a_macro_of_its_inputs_alone_renders_once_per_input_and_the_same_text() -> None:
    """``declare`` (a namespace of its own, a pure callee) is memoized; every prefix renders the tools again, and
    from the second render on each declaration is reused, the text unchanged."""
    assert memoized(DECLARATIONS) == ["declare", "typed"]
    copy = Copy(DECLARATIONS)
    for end in range(1, len(CONVERSATION) + 1):
        copy.render(CONVERSATION[:end], TOOLS)
    assert copy.memo is not None and copy.memo.hits == 2 * (len(CONVERSATION) - 1)


def test_a_reused_call_counts_the_arms_its_first_render_took() -> None:
    """Coverage may drop the arms recorded since a checkpoint (``Coverage.skip``): a declaration reused afterwards
    counts its arms again, as its render would."""
    with_memo, without = Copy(DECLARATIONS), Copy(DECLARATIONS, memo=False)
    for copy in (with_memo, without):
        copy.render(CONVERSATION[:1], TOOLS)
        copy.recorder.ran = set()
        copy.render(CONVERSATION[:2], TOOLS)
    assert with_memo.memo is not None and with_memo.memo.hits == 2
    assert with_memo.recorder.ran == without.recorder.ran
    assert any(b.body_line in with_memo.recorder.ran for b in with_memo.branches.branches if b.line == 1)


def test_a_template_variable_a_macro_reads_is_part_of_the_key() -> None:
    """A macro reading a template kwarg (``style``) is reused only for the same value: rendered with one value,
    then another, each text is the plain render's."""
    template = "{%- macro m(x) %}{% if style == 'loud' %}{{ x | upper }}{% else %}{{ x }}{% endif %}{% endmacro %}" + (
        "{%- for m_ in messages %}{{ m(m_.content) }}{% endfor %}"
    )
    assert memoized(template) == ["m"]
    copy = Copy(template)
    assert copy.render(CONVERSATION[:1], style="loud") == "HI"
    assert copy.render(CONVERSATION[:1], style="quiet") == "hi"
    assert copy.render(CONVERSATION[:1]) == "hi"
    assert copy.memo is not None and copy.memo.hits == 0
    copy.render(CONVERSATION[:1], style="loud")
    assert copy.memo.hits == 1


@pytest.mark.parametrize(
    "template",
    [
        # a namespace the template keeps across calls (Qwen2-VL's image counter)
        "{%- set ns = namespace(n=0) %}{%- macro m(x) %}{% set ns.n = ns.n + 1 %}{{ ns.n }}{{ x }}{% endmacro %}"
        "{%- for m_ in messages %}{{ m(m_.role) }}{% endfor %}",
        # a variable the template sets
        "{%- set p = messages | length %}{%- macro m(x) %}{{ p }}{{ x }}{% endmacro %}"
        "{%- for m_ in messages %}{{ m(m_.role) }}{% endfor %}",
        # an impure filter
        "{%- macro m(x) %}{{ [x, x] | random }}{% endmacro %}{%- for m_ in messages %}{{ m(m_.role) }}{% endfor %}",
        # a filter named at run time
        "{%- macro m(x) %}{{ [x] | map('random') | join }}{% endmacro %}"
        "{%- for m_ in messages %}{{ m(m_.role) }}{% endfor %}",
        # an identity no key of values can tell (red team 45)
        "{%- macro r(m, last) %}{% if m is sameas last %}LAST:{% endif %}{{ m.content }}{% endmacro %}"
        "{%- for m_ in messages %}{{ r(m_, messages[-1]) }}{% endfor %}",
        "{%- macro r(xs, y) %}{{ xs | select('sameas', y) | list | length }}{% endmacro %}"
        "{{ r(messages, messages[0]) }}",
        # a filter named at run time: ``map(f)`` may be ``random``
        "{%- macro coin(f) %}{{ [[0, 1]] | map(f) | first }}{% endmacro %}{{ coin(pick) }}",
        # a filter name handed on (``map('map', f)``), or in a starred list (red team 46)
        "{%- macro coin(f) %}{{ [[[0, 1]]] | map('map', f) | first | first }}{% endmacro %}{{ coin(pick) }}",
        "{%- macro r(m, spec) %}{{ [m] | selectattr(*spec) | list | length }}{% endmacro %}"
        "{%- for m_ in messages %}{{ r(m_, ['content', 'sameas', messages[-1].content]) }}{% endfor %}",
        # a macro calling one that is not memoized
        "{%- set ns = namespace(n=0) %}{%- macro c() %}{% set ns.n = ns.n + 1 %}{{ ns.n }}{% endmacro %}"
        "{%- macro m(x) %}{{ c() }}{{ x }}{% endmacro %}{%- for m_ in messages %}{{ m(m_.role) }}{% endfor %}",
    ],
)
def test_a_macro_that_reads_more_than_its_inputs_is_not_memoized(template: str) -> None:
    assert memoized(template) == []


def test_a_macro_defined_after_a_call_of_its_caller_is_no_input_the_key_misses() -> None:
    """``a`` tests whether ``b`` is defined; ``b`` is defined between two calls of ``a`` with the same argument: ``a``
    is not memoized (red team 45: the second call reused the first's ``none``)."""
    template = (
        "{%- macro a(x) %}{{ x }}:{% if b is defined %}{{ b() }}{% else %}none{% endif %}{% endmacro %}"
        "{{ a(messages[0].content) }}|{%- macro b() %}B{% endmacro %}{{ a(messages[0].content) }}"
    )
    assert memoized(template) == ["b"]
    assert Copy(template).render(CONVERSATION[:1]) == "hi:none|hi:B"


def test_autoescaping_at_the_call_is_part_of_the_key() -> None:
    """``join`` writes what autoescaping at the call says: the same call outside and inside ``{% autoescape %}``."""
    template = (
        "{%- macro m(xs) %}{{ xs | join('<br>' | safe) }}{% endmacro %}{%- set xs = messages | map(attribute='content')"
        " | list %}{{ m(xs) }}|{% autoescape true %}{{ m(xs) }}{% endautoescape %}"
    )
    assert memoized(template) == ["m"]
    messages = [{"role": "user", "content": "<a>"}, {"role": "user", "content": "b"}]
    assert Copy(template).render(messages) == "<a><br>b|&lt;a&gt;<br>b"


def test_a_render_as_deep_as_the_stack_renders_as_without_the_memo() -> None:
    """A macro recursing over a nested kwarg: the memo's frame per call would run out of stack before the plain
    render does, so coverage renders it again without the memo (``Coverage.play``); a reused text is reused no
    deeper in the stack than where it was rendered, so no render outlives the plain one's stack either (red team
    45)."""
    template = (
        "{%- macro walk(x) %}{% if x is mapping %}{% for k, v in x.items() %}<{{ k }}>{{ walk(v) }}{% endfor %}"
        "{% else %}{{ x }}{% endif %}{% endmacro %}{{ walk(depth) | length }}"
    )
    with_memo, without = Copy(template), Copy(template, memo=False)
    coverage = Coverage(with_memo.branches, with_memo.copy, None)
    coverage.recorder = with_memo.recorder
    coverage.memo = MacroMemo(coverage.recorder)
    for depth in (*range(2, 40, 6), *range(2, 40, 6), *range(50, 240, 20)):  # the shallow ones twice: reused
        nested: Any = 0
        for _ in range(depth):
            nested = {"a": nested}
        kwargs = {"depth": nested}
        renderer = SimpleNamespace(template_kwargs=kwargs, tokenizer=_tokenizer())
        ours = _outcome(coverage.play, renderer, CONVERSATION[:1], None, False)
        assert ours == without.render(CONVERSATION[:1], **kwargs), depth
        assert with_memo.recorder.ran == without.recorder.ran
    assert coverage.memo.hits > 0  # the shallow ones were reused


@pytest.mark.parametrize(
    "template",
    [
        # a recursive loop inside the memoized macro, reused from deep inside a recursive loop of the template
        "{%- macro tree(x) %}{% for n in [x] recursive %}{% if n is mapping %}<{{ loop(n.c) }}>{% else %}{{ n }}"
        "{% endif %}{% endfor %}{% endmacro %}{{ tree(data) | length }}|{%- for n in [outer] recursive %}"
        "{% if n is mapping %}{{ loop(n.c) }}{% else %}{{ tree(data) | length }}{% endif %}{% endfor %}",
        # a macro that is not memoized (it writes the template's namespace) recursing, then calling a memoized one
        "{%- set ns = namespace(k=0) %}{%- macro walk(x) %}{% if x is mapping %}<{{ walk(x.c[0]) }}>{% else %}{{ x }}"
        "{% endif %}{% endmacro %}{%- macro down(n, x) %}{% set ns.k = ns.k + 1 %}{% if n > 0 %}{{ down(n - 1, x) }}"
        "{% else %}{{ walk(x) | length }}{% endif %}{% endmacro %}{{ down(0, data) }}|{{ down(outer, data) }}",
    ],
)
def test_a_text_is_not_reused_deeper_in_the_stack_than_it_was_rendered(template: str) -> None:
    """Red team 46: a text rendered near the top of the stack, reused deep inside a recursion the memo does not
    count, skipped the frames that run the plain render out of stack. Each depth: the memo's render through
    coverage (``Coverage.play``) is the plain one's, a text or the same error, with the same arms."""
    with_memo, without = Copy(template), Copy(template, memo=False)
    coverage = Coverage(with_memo.branches, with_memo.copy, None)
    coverage.recorder = with_memo.recorder
    coverage.memo = MacroMemo(coverage.recorder)
    nested: Any = 0
    for _ in range(30):
        nested = {"c": [nested]}
    outcomes = set()
    for depth in (5, 60, 120, 150, 175, 200, 250):
        outer: Any = 0 if "down" in template else nested
        if "down" not in template:
            for _ in range(depth):
                outer = {"c": [outer]}
        kwargs = {"data": nested, "outer": depth if "down" in template else outer}
        renderer = SimpleNamespace(template_kwargs=kwargs, tokenizer=_tokenizer())
        ours = _outcome(coverage.play, renderer, CONVERSATION[:1], None, False)
        theirs = without.render(CONVERSATION[:1], **kwargs)
        assert ours.split(":")[0] == theirs.split(":")[0], depth  # the text, or the same error (its wording moves)
        assert with_memo.recorder.ran == without.recorder.ran
        outcomes.add(theirs.startswith("RecursionError"))
    assert outcomes == {True, False}  # some depths render, some run out of stack


@pytest.mark.parametrize(
    "template",
    [
        "{%- macro same(xs) %}{% if xs[0] in xs[1:] %}same{% else %}apart{% endif %}{% endmacro %}"
        "{%- set n = 'nan' | float %}{{ same([n, n]) }} {{ same([n, 'nan' | float]) }}",
        "{%- macro count(xs) %}{{ xs | unique | list | length }}{% endmacro %}"
        "{%- set n = 'nan' | float %}{{ count([n, n]) }} {{ count([n, 'nan' | float]) }}",
    ],
)
def test_a_nan_in_a_call_reuses_nothing(template: str) -> None:
    """Red team 46: ``in`` and ``unique`` tell two NaN objects apart by identity, which no key of values can."""
    copy = Copy(template)
    assert copy.render(CONVERSATION[:1]) in ("same apart", "1 2")
    assert copy.memo is not None and copy.memo.hits == 0


def test_a_call_whose_inputs_are_not_plain_data_renders_as_usual() -> None:
    """A namespace handed to a macro, or a clock the macro calls: memoized by their code, never reused."""
    template = (
        "{%- set ns = namespace(n=0) %}{%- macro bump(s) %}{% set s.n = s.n + 1 %}{{ s.n }}{% endmacro %}"
        "{%- macro now() %}{{ strftime_now('%H') | length }}{% endmacro %}"
        "{%- for m_ in messages %}{{ bump(ns) }}{{ now() }}{% endfor %}"
    )
    assert memoized(template) == ["bump", "now"]
    copy = Copy(template)
    for _ in range(2):
        assert copy.render(CONVERSATION) == "12223242"
    assert copy.memo is not None and copy.memo.hits == 0


@needs_corpus
def test_the_corpus_templates_with_macros_render_the_same_text_and_arms_through_the_memo() -> None:
    """Every corpus template with a macro, every prefix of a tool conversation rendered twice with and without the
    memo: the same text (the plain render's, ``Copy.render``) or the same error, and the same arms recorded."""
    tried = reused = 0
    for path in sorted(CORPUS.glob("*.jinja")):
        template = path.read_text(encoding="utf-8")
        if "macro" not in template:
            continue
        try:
            copies = Copy(template), Copy(template, memo=False)
        except Exception:
            continue
        if copies[0].copy is None or not copies[0].branches.memoized:
            continue
        tried += 1
        for _round in range(2):
            for end in range(1, len(CONVERSATION) + 1):
                assert copies[0].render(CONVERSATION[:end], TOOLS) == copies[1].render(CONVERSATION[:end], TOOLS)
        assert copies[0].recorder.ran == copies[1].recorder.ran, path.name
        reused += bool(copies[0].memo and copies[0].memo.hits)
    assert tried >= 100 and reused >= 100, (tried, reused)


def test_without_a_stack_to_measure_nothing_is_memoized(monkeypatch: pytest.MonkeyPatch) -> None:
    """The depth rule reads CPython's ``sys._getframe``; a Python without it renders every call as usual."""
    from tito_audit.rendering import macro_memo

    monkeypatch.setattr(macro_memo, "_FRAME", None)
    copy = Copy(DECLARATIONS)
    for end in range(1, len(CONVERSATION) + 1):
        copy.render(CONVERSATION[:end], TOOLS)
    assert copy.memo is not None and copy.memo.hits == 0
