"""jinja's sandbox, making each attribute decision once per (type, name) instead of on every access.

The sandbox decides at every ``{{ message.content.strip() }}`` whether the attribute is safe: about ten
``isinstance`` checks, three of them against ``collections.abc``'s mutable ABCs. And a dict key written as an
attribute (``message.role``) raises an AttributeError, which the sandbox catches before it looks the key up.
An audit makes some fifty such accesses per render, and a hundred renders per template.

Four changes to one environment, none of which changes an answer:

- ``is_safe_attribute`` is remembered per (type of the object, name). jinja's answer depends on nothing else.
  It is made of ``isinstance`` checks of the object, ``attr.startswith``, and ABC checks that ABCMeta itself
  caches per class until the next ``register`` anywhere (``abc.get_cache_token``). The memo is dropped when
  that token moves. An object whose ``__class__`` is not its type (a proxy) is decided every time.
- ``getattr`` of a plain ``dict`` with a name that no dict has as an attribute goes straight to the key lookup.
  This is what jinja does after ``getattr`` failed, with the same exceptions caught and the same undefined
  returned. A plain dict's attributes are its type's, and a builtin type's attributes cannot change. A plain
  str's methods (``strip``, ``startswith``) skip jinja's check for ``format``, which they are not.
- ``getattr`` of a jinja ``namespace()`` (``ns.found``: the commonest access in tool templates) reads its
  attributes' dict directly with a name that does not start with an underscore. jinja asks the namespace's own
  ``__getattribute__`` (Python code that looks the dict up), then, for a missing name, ``obj[name]``, which a
  namespace refuses; its answer for such a name is the value (through the same ``str.format`` wrapping and
  safety decision) or the undefined. Only for a class whose attribute lookup is jinja's ``Namespace``'s, with no
  ``__getitem__`` or ``__getattr__`` of its own (transformers' ``TemplateNamespace`` is one; decided per class).
- ``call`` of a builtin method (``content.strip()``, ``name.startswith('x')``) calls it. jinja first asks the
  method for ``unsafe_callable`` and ``alters_data`` and for ``jinja_pass_arg`` on it and on its ``__call__``;
  no such attribute can exist on a builtin method or a method-wrapper, so every answer is "no".

Applied only where the environment's three methods are still jinja's ``ImmutableSandboxedEnvironment``'s: the
facts above are about those. ``tests/rendering/test_sandbox_decisions.py`` holds all four to jinja's answers.
"""

from __future__ import annotations

import abc
import types
from typing import Any

from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment
from jinja2.utils import Namespace

_DICT_ATTRIBUTES = frozenset(dir(dict))
# A str's public methods but the two jinja wraps (``wrap_str_format``): for these, jinja's wrapping step is a no-op
_STR_METHODS = frozenset(n for n in dir(str) if not n.startswith("_")) - {"format", "format_map"}
_MEMO_SIZE = 4096  # (type, name) pairs: templates see a few dozen types; a bound for a caller's odd objects


def _plain_namespace(cls: type) -> bool:
    """Whether an attribute of a ``cls`` object is found exactly as jinja's ``Namespace`` finds it: its dict, or
    AttributeError, and no ``obj[name]`` to fall back on."""
    return (
        issubclass(cls, Namespace)
        and cls.__getattribute__ is Namespace.__getattribute__
        and getattr(cls, "__getitem__", None) is None
        and getattr(cls, "__getattr__", None) is None
    )


def memoize_decisions(env: Any) -> None:
    """Install the four changes on ``env`` (idempotent); an environment of another kind is left as it is."""
    if getattr(env, "decisions_memoized", False):
        return
    kind = type(env)
    if kind.is_safe_attribute is not ImmutableSandboxedEnvironment.is_safe_attribute:
        return
    if kind.getattr is not SandboxedEnvironment.getattr or kind.call is not SandboxedEnvironment.call:
        return
    if kind.is_safe_callable is not SandboxedEnvironment.is_safe_callable or env.context_class is not Context:
        return
    decide = env.is_safe_attribute  # jinja's, bound
    jinja_getattr = env.getattr
    jinja_call = env.call
    memo: dict[tuple[type, str], bool] = {}
    namespaces: dict[type, bool] = {}  # ``_plain_namespace`` per class
    token = [abc.get_cache_token()]

    def is_safe_attribute(obj: Any, attr: str, value: Any) -> bool:
        cls = type(obj)
        if obj.__class__ is not cls or type(attr) is not str:
            return bool(decide(obj, attr, value))
        now = abc.get_cache_token()
        if now != token[0]:  # an ABC registered a class: ABC answers may have changed
            memo.clear()
            token[0] = now
        key = (cls, attr)
        safe = memo.get(key)
        if safe is None:
            safe = bool(decide(obj, attr, value))
            if len(memo) >= _MEMO_SIZE:
                memo.clear()
            memo[key] = safe
        return safe

    def getattr_(obj: Any, attribute: str) -> Any:
        cls = type(obj)
        if cls is dict and type(attribute) is str and attribute not in _DICT_ATTRIBUTES:
            try:
                return obj[attribute]
            except (TypeError, LookupError):
                return env.undefined(obj=obj, name=attribute)
        plain = namespaces.get(cls)
        if plain is None:
            plain = namespaces[cls] = _plain_namespace(cls) if len(namespaces) < _MEMO_SIZE else False
        if plain and type(attribute) is str and not attribute.startswith("_"):
            try:
                value = object.__getattribute__(obj, "_Namespace__attrs")[attribute]
            except KeyError:
                return env.undefined(obj=obj, name=attribute)
            wrapped = env.wrap_str_format(value)
            if wrapped is not None:
                return wrapped
            return value if env.is_safe_attribute(obj, attribute, value) else env.unsafe_undefined(obj, attribute)
        if cls is str and type(attribute) is str and attribute in _STR_METHODS:
            value = getattr(obj, attribute)
            return value if env.is_safe_attribute(obj, attribute, value) else env.unsafe_undefined(obj, attribute)
        return jinja_getattr(obj, attribute)

    def call(__context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        if type(__obj) is not types.BuiltinMethodType:
            return jinja_call(__context, __obj, *args, **kwargs)
        kwargs.pop("_block_vars", None)
        kwargs.pop("_loop_vars", None)
        try:
            return __obj(*args, **kwargs)
        except StopIteration:  # as jinja's ``Context.call``
            return __context.environment.undefined(
                "value was undefined because a callable raised a StopIteration exception"
            )

    # jinja's own methods call ``self.is_safe_attribute``, and compiled templates ``environment.getattr``: both
    # find these first, on the instance.
    env.is_safe_attribute = is_safe_attribute
    env.getattr = getattr_
    env.call = call
    env.decisions_memoized = True
