"""The sandbox with its attribute decisions memoized answers every access as jinja's own sandbox does."""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import MutableSequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jinja2 import Undefined, pass_context
from jinja2.sandbox import ImmutableSandboxedEnvironment, unsafe
from jinja2.utils import Namespace

from tito_audit.rendering.sandbox_decisions import memoize_decisions


class Plain:
    """A class of the caller's, with an attribute, a method and a private name."""

    def __init__(self) -> None:
        self.role = "user"
        self._secret = 1

    def append(self, x: object) -> None:  # a name that is unsafe on a list, not here
        pass


def _gen():
    yield 1


def _function() -> None:
    pass


class _Claims:
    """An object whose ``__class__`` is what it was told to claim, as ``unittest.mock`` specs and proxies do."""

    def __init__(self, claimed: type) -> None:
        self._claimed = claimed

    @property  # type: ignore[misc]
    def __class__(self):
        return self._claimed

    def append(self, x: object) -> None:
        pass


class _Indexed(Namespace):
    """A namespace that answers ``obj[name]`` too: jinja falls back on it for a missing name."""

    def __getitem__(self, name: str) -> str:
        return f"item {name}"


class _Fallback(Namespace):
    """A namespace with a ``__getattr__`` of its own (asked once the lookup fails)."""

    def __getattr__(self, name: str) -> str:
        return f"attr {name}"


def _template_namespace() -> Namespace:
    """transformers' ``TemplateNamespace``, as a template's ``namespace()`` makes it."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    return _compile_jinja_template("{{ 1 }}").globals["namespace"](found=True, n=2)


_REFERENT = Plain()  # what the weak proxy below stands for
OBJECTS = [
    "text",
    {"role": "user", "content": "hi", "items": "a key named items", "__class__": "a key"},
    {},
    [1, 2],
    (1, 2),
    {1, 2},
    frozenset({1}),
    deque([1]),
    7,
    1.5,
    True,
    None,
    Namespace(found=True, n=2),
    Namespace({"_secret": 1, "fmt": "{0}".format, "upper": "x".upper, "": "empty name", "content": None}),
    _template_namespace(),
    _Indexed(found=False),
    _Fallback(n=3),
    Plain(),
    Plain,
    str,
    _function,
    "x".upper,
    Plain().append,
    _gen(),
    weakref.proxy(_REFERENT),
    _Claims(list),
    _Claims(object),
]
NAMES = [
    "strip",
    "split",
    "maketrans",
    "role",
    "content",
    "items",
    "keys",
    "get",
    "update",
    "pop",
    "clear",
    "append",
    "extend",
    "add",
    "upper",
    "format",
    "format_map",
    "startswith",
    "found",
    "n",
    "mro",
    "__class__",
    "__globals__",
    "__code__",
    "_secret",
    "gi_frame",
    "__func__",
    "__self__",
    "missing",
    "real",
    "fmt",
    "",
    "_Namespace__attrs",
]


def _answer(env: ImmutableSandboxedEnvironment, obj: object, name: str) -> tuple:
    """What ``env.getattr`` gives, in a form two environments can be compared by."""
    value = env.getattr(obj, name)
    if isinstance(value, Undefined):
        return (
            "undefined",
            value._undefined_hint,
            value._undefined_name,
            value._undefined_exception,
            value._undefined_obj is obj,
        )
    if callable(value) and getattr(value, "__name__", None) in ("format", "format_map"):
        return ("format", value.__name__, type(value).__name__)  # jinja's wrapper (new per access), or the raw method
    return ("value", value)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(range(len(OBJECTS))), st.sampled_from(NAMES)), max_size=60))
def test_memoized_decisions_answer_as_jinja_does(asks) -> None:
    """Any sequence of accesses (so the memo is asked after other types and names filled it) gets jinja's answer:
    the value, jinja's undefined, or the unsafe-attribute undefined, with the same hint."""
    jinja = ImmutableSandboxedEnvironment()
    ours = ImmutableSandboxedEnvironment()
    memoize_decisions(ours)
    assert ours.decisions_memoized
    for index, name in asks * 2:
        obj = OBJECTS[index]
        assert _answer(ours, obj, name) == _answer(jinja, obj, name), (obj, name)
        assert ours.getitem(obj, name) == jinja.getitem(obj, name) or (
            _undefined_alike(ours.getitem(obj, name), jinja.getitem(obj, name))
        )


def test_every_object_and_name_answers_as_jinja_does() -> None:
    """Each (object, name) pair once, in order, then again from the filled memo: none is left to chance."""
    jinja = ImmutableSandboxedEnvironment()
    ours = ImmutableSandboxedEnvironment()
    memoize_decisions(ours)
    for _ in range(2):
        for obj in OBJECTS:
            for name in NAMES:
                assert _answer(ours, obj, name) == _answer(jinja, obj, name), (obj, name)


def _undefined_alike(a: object, b: object) -> bool:
    if isinstance(a, Undefined) and isinstance(b, Undefined):
        return (a._undefined_hint, a._undefined_name) == (b._undefined_hint, b._undefined_name)
    return callable(a) and callable(b) and getattr(a, "__name__", None) == getattr(b, "__name__", None)


def _called(env: ImmutableSandboxedEnvironment, fn: object, *args: object, **kwargs: object) -> tuple:
    context = env.from_string("").new_context({})
    try:
        value = env.call(context, fn, *args, **kwargs)
    except Exception as exc:
        return ("raised", type(exc), str(exc))
    if isinstance(value, Undefined):
        return ("undefined", value._undefined_hint)
    return ("value", value)


@pass_context
def _with_context(context: object, x: int) -> tuple:
    return (type(context).__name__, x)


def test_calls_answer_as_jinja_does() -> None:
    """Builtin methods are called directly; every other callable (context-taking, unsafe, a class) goes through
    jinja; a builtin that raises StopIteration gives jinja's undefined; loop and block variables never reach a
    builtin."""
    jinja = ImmutableSandboxedEnvironment()
    ours = ImmutableSandboxedEnvironment()
    memoize_decisions(ours)
    calls = [
        ("a b".split, (), {}),
        ("a,b".split, (",",), {"maxsplit": 1}),
        ("x".upper, (), {"_loop_vars": {"i": 1}, "_block_vars": {}}),
        ({"k": 1}.items, (), {}),
        ([3, 1].index, (1,), {}),
        ([1].index, (5,), {}),
        (next, (iter(()),), {}),
        (len, ("abc",), {}),
        (_with_context, (2,), {}),
        (Plain().append, (1,), {}),
        (unsafe(lambda: 1), (), {}),
        (Namespace, (), {"a": 1}),
        ([].append, (1,), {}),
    ]
    for fn, args, kwargs in calls:
        mine = _called(ours, fn, *args, **dict(kwargs))
        theirs = _called(jinja, fn, *args, **dict(kwargs))
        if mine[0] == "value" and isinstance(mine[1], Namespace):
            assert theirs[0] == "value" and isinstance(theirs[1], Namespace)
            continue
        assert mine == theirs, fn


def test_a_class_registered_with_an_abc_later_is_decided_anew() -> None:
    """ABCMeta answers ``isinstance`` from a cache it drops when any class is registered; so does the memo. Once
    ``Box`` is a MutableSequence, its ``append`` is unsafe in the immutable sandbox."""

    class Box:
        def append(self, x: object) -> None:
            pass

    env = ImmutableSandboxedEnvironment()
    memoize_decisions(env)
    assert env.is_safe_attribute(Box(), "append", None)
    MutableSequence.register(Box)
    assert not env.is_safe_attribute(Box(), "append", None)
    assert not ImmutableSandboxedEnvironment().is_safe_attribute(Box(), "append", None)


def test_an_object_claiming_another_class_is_decided_by_its_claim() -> None:
    """jinja's ``isinstance`` checks believe ``__class__``: an object claiming to be a list has a list's unsafe
    ``append``. Two objects of one type can claim different classes, so such objects are decided every time."""
    env = ImmutableSandboxedEnvironment()
    memoize_decisions(env)
    assert env.is_safe_attribute(_Claims(object), "append", None)
    assert not env.is_safe_attribute(_Claims(list), "append", None)
    assert not ImmutableSandboxedEnvironment().is_safe_attribute(_Claims(list), "append", None)


def test_an_environment_with_its_own_decisions_is_left_alone() -> None:
    """The memo rests on what jinja's two methods look at; an environment that decides otherwise keeps its own."""

    class Strict(ImmutableSandboxedEnvironment):
        def is_safe_attribute(self, obj, attr, value):
            return isinstance(value, str)  # depends on the value: not a function of type and name

    env = Strict()
    memoize_decisions(env)
    assert not getattr(env, "decisions_memoized", False)
    assert "is_safe_attribute" not in vars(env) and "getattr" not in vars(env)


def test_renders_of_an_audit_go_through_memoized_decisions_and_unsafe_access_is_still_refused(loaded) -> None:
    """``prepare_for_renders`` installs it on the template's environment; the hardened sandbox still raises on an
    unsafe attribute, through the memo."""
    from tito_audit.errors import RenderError
    from tito_audit.rendering.analysis import compiled_template
    from tito_audit.rendering.renderer import Renderer

    tok = loaded("Qwen/Qwen2.5-7B-Instruct").tokenizer
    template = "{% for m in messages %}{{ m.role }}:{{ m.content.strip() }}|{{ m.missing is defined }};{% endfor %}"
    renderer = Renderer(tok, template)
    assert compiled_template(template).environment.decisions_memoized
    messages = [{"role": "user", "content": " hi "}, {"role": "assistant", "content": "yo"}]
    assert renderer.render(messages) == "user:hi|False;assistant:yo|False;"
    hostile = "{{ messages.append(1) }}{{ messages[0].content.__class__ }}"
    with pytest.raises(RenderError) as err:
        Renderer(tok, hostile).render(messages)
    assert err.value.kind == "security"
