"""Any Python encoder, named ``module:function`` (or ``path/to/file.py:function``): DeepSeek V3.2/V4-style
encoders that ship as Python instead of a chat template, or a wrapper around a trainer's own renderer.

The function is called as ``function(messages, tools=..., add_generation_prompt=..., date=..., **options)``, each
keyword only where its signature takes it (or takes ``**kwargs``, except ``date``: only where named); ``date`` is
the audit's pinned date (a ``datetime``), options are the audit's template kwargs. It returns the prompt text
(encoded with the model's tokenizer, as the engine does) or a list of token ids; the report says which it returned.

Its options are its keyword parameters: their values are read from their annotations (``bool``, ``Literal``, an
``Enum``) or a boolean default, and, for a string option (``thinking_mode="chat"``), tried among the identifier-like
string constants of its code (its module's, and those of the modules whose functions it calls). An encoder taking
``**kwargs`` takes options no signature lists: the names its code mentions as string constants (``kwargs.get(...)``)
are its known options, any other one is taken only if it changes a probe render, and its switches cannot all be
enumerated (the report says so).

This is the user's own code, run in this process without a sandbox because the user named it: unlike a chat
template, which the audit treats as untrusted and renders only in transformers' sandbox.
"""

from __future__ import annotations

import ast
import datetime as dt
import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tito_audit.engines.base import (
    Engine,
    EngineInfo,
    Message,
    Native,
    Rendered,
    RendererRefused,
    RendererUnavailable,
    candidate_values,
    refused,
)
from tito_audit.registry import RENDERERS

if TYPE_CHECKING:
    from tito_audit.rendering.guard import RenderLimits
    from tito_audit.sources.load import LoadedModel

_FIXED = ("messages", "tools", "add_generation_prompt")
DATE = "date"  # the keyword an encoder takes the audit's pinned date with
_MAX_CONSTANTS = 256  # identifier-like string constants kept from an encoder's code (tried as option values)


def is_encoder_spec(spec: str) -> bool:
    """``module:function`` or ``file.py:function``."""
    target, sep, function = spec.rpartition(":")
    return bool(sep and target and function.isidentifier())


def _imported(model_name: str, spec: str) -> Callable[..., Any]:
    target, _, function = spec.rpartition(":")
    try:
        if target.endswith(".py"):
            path = Path(target)
            loader = importlib.util.spec_from_file_location(path.stem, path)
            if loader is None or loader.loader is None or not path.exists():
                raise ImportError(f"no Python file {target}")
            module = importlib.util.module_from_spec(loader)
            loader.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
    except Exception as exc:
        raise RendererUnavailable(model_name, f"renderer {spec}: {refused('import', exc).message}") from None
    fn = getattr(module, function, None)
    if not callable(fn):
        raise RendererUnavailable(model_name, f"renderer {spec}: {target} has no function {function}")
    return fn


def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    try:
        return inspect.signature(fn, eval_str=True)  # annotations written as strings (``from __future__``)
    except Exception:
        return inspect.signature(fn)


def _source_file(fn: Any) -> str | None:
    """The Python file ``fn`` is defined in (a module imported by name or loaded from a file path alike), None for
    the standard library's and for what has no source."""
    if (getattr(fn, "__module__", None) or "").partition(".")[0] in sys.stdlib_module_names:
        return None  # json.dumps and friends: not the encoder's options
    try:
        path = inspect.getsourcefile(fn)
    except TypeError:
        return None
    return path if path and Path(path).is_file() else None


def _string_constants(path: str) -> list[str]:
    """Identifier-like string constants of a Python file (``"chat"``, ``"enable_thinking"``), in order."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return []
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier()
    ]


def code_constants(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The identifier-like string constants of the file ``fn`` is defined in and of the files of the functions ``fn``
    calls by a global name (a wrapper's encoder), first seen first, at most ``_MAX_CONSTANTS``."""
    functions = [fn]
    code = getattr(fn, "__code__", None)
    for name in code.co_names if code is not None else ():
        called = getattr(fn, "__globals__", {}).get(name)
        if callable(called) and not isinstance(called, type):
            functions.append(called)
    seen: dict[str, None] = {}
    for path in dict.fromkeys(p for p in map(_source_file, functions) if p is not None):
        for value in _string_constants(path):
            seen.setdefault(value, None)
    return tuple(seen)[:_MAX_CONSTANTS]


def _source_detail(fn: Callable[..., Any]) -> dict[str, str]:
    """The encoder's source file and its sha256: what rendered, for the report's provenance."""
    try:
        path = inspect.getsourcefile(fn)
    except TypeError:
        return {}
    if not path or not Path(path).is_file():
        return {}
    return {"source_file": path, "source_sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest()}


class PythonEncoder(Engine):
    def __init__(self, model_name: str, spec: str) -> None:
        self._fn = _imported(model_name, spec)
        params = _signature(self._fn).parameters
        first = next(iter(params), None)
        self._any_keyword = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        self._params = {n: p for n, p in params.items() if n not in _FIXED and n != first and p.kind in named}
        self._takes_date = DATE in self._params
        self._takes = {n for n in _FIXED if n in params}
        self._constants: tuple[str, ...] | None = None
        self._returned: set[str] = set()
        self._effect: dict[tuple[str, str], bool] = {}
        module = getattr(self._fn, "__module__", "") or ""
        function = f"{module}.{getattr(self._fn, '__qualname__', '?')}"
        self.info = EngineInfo(spec, f"python encoder {function}", None, detail=_source_detail(self._fn))

    @property
    def constants(self) -> tuple[str, ...]:
        if self._constants is None:
            self._constants = code_constants(self._fn)
        return self._constants

    @property
    def option_names(self) -> frozenset[str]:
        """Its keyword parameters; with ``**kwargs``, also the names its code mentions as string constants."""
        names = frozenset(n for n in self._params if n != DATE)
        return names | frozenset(self.constants) if self._any_keyword else names

    @property
    def options_enumerable(self) -> bool:
        return not self._any_keyword

    def option_values(self, name: str) -> tuple[Any, ...] | None:
        param = self._params.get(name)
        if param is None:
            return None
        annotation = None if param.annotation is inspect.Parameter.empty else param.annotation
        default = None if param.default is inspect.Parameter.empty else param.default
        return candidate_values(annotation, default)

    def code_values(self, name: str) -> tuple[Any, ...]:
        """Values to try for an option whose values are not declared: booleans for a ``**kwargs`` option, and the
        identifier-like string constants of the encoder's code (a probe render decides which of them are modes)."""
        param = self._params.get(name)
        default = None if param is None or param.default is inspect.Parameter.empty else param.default
        guesses = [c for c in self.constants if c != default and c != name]
        return (True, False, *guesses) if param is None else tuple(guesses)

    def takes_option(self, name: str, value: Any) -> bool:
        if name in self._params and name != DATE:
            return True
        if not self._any_keyword:
            return False
        if name in self.constants:
            return True
        key = (name, repr(value))
        if key not in self._effect:  # **kwargs: taken when it changes a probe render (a typo changes none)
            from tito_audit.engines.seam import changes_a_probe

            self._effect[key] = changes_a_probe(self, {name: value})
        return self._effect[key]

    @property
    def native(self) -> Native | None:
        if not self._returned:
            return None
        return "text and ids" if len(self._returned) > 1 else "ids" if "ids" in self._returned else "text"

    def render(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None,
        add_generation_prompt: bool,
        options: dict[str, Any],
        date: dt.datetime,
    ) -> Rendered:
        if not self._any_keyword:
            self.refuse_unknown(options)
        kwargs: dict[str, Any] = dict(options)
        if "tools" in self._takes or self._any_keyword:
            kwargs["tools"] = tools
        elif tools:
            raise RendererRefused(f"{self.name} takes no tools")
        if "add_generation_prompt" in self._takes or self._any_keyword:
            kwargs["add_generation_prompt"] = add_generation_prompt
        if self._takes_date:
            kwargs[DATE] = date
        try:
            out = self._fn(messages, **kwargs)
        except Exception as exc:
            raise refused(self.name, exc) from exc
        if isinstance(out, str):
            self._returned.add("text")
            return Rendered(text=out)
        if isinstance(out, list | tuple) and all(isinstance(i, int) for i in out):
            self._returned.add("ids")
            return Rendered(ids=list(out))
        raise RendererRefused(f"{self.name} returned {type(out).__name__}, not text or a list of token ids")


def for_model(model: LoadedModel, spec: str | None, limits: RenderLimits | None) -> Engine:
    """``spec`` is the whole name (``module:function``): a pattern, not a name with an ``@`` choice."""
    return PythonEncoder(model.name, spec or "")


RENDERERS.register(
    "python-encoder",
    "any Python function that renders messages (module:function or file.py:function), unsandboxed",
    for_model,
    extra="encoders",
    order=40,
    meta={
        "usage": "module:function | file.py:function",
        "matches": is_encoder_spec,
        "library": 'your code (`[encoders]`: time-machine, see "Dates and the wall clock")',
        "renders": "text or ids: the report says which its renders returned",
        "notes": "called as `function(messages, tools=..., add_generation_prompt=..., date=..., **options)`, each "
        "keyword only where its signature takes it (or takes `**kwargs`; `date`, the audit's pinned date as a "
        "`datetime`, only where it is named)",
    },
)
