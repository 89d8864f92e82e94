"""Any Python encoder, named ``module:function`` (or ``path/to/file.py:function``): DeepSeek V3.2/V4-style
encoders that ship as Python instead of a chat template, or a wrapper around a trainer's own renderer.

The function is called as ``function(messages, tools=..., add_generation_prompt=..., **options)``, each keyword
only where its signature takes it (or takes ``**kwargs``); options are the audit's template kwargs. It returns the
prompt text (encoded with the model's tokenizer, as the engine does) or a list of token ids.

This is the user's own code, run in this process without a sandbox because the user named it: unlike a chat
template, which the audit treats as untrusted and renders only in transformers' sandbox.
"""

from __future__ import annotations

import datetime as dt
import importlib
import importlib.util
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tito_audit.engines.base import Engine, EngineInfo, Message, Rendered, RendererRefused, RendererUnavailable, refused

_FIXED = ("messages", "tools", "add_generation_prompt")


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


class PythonEncoder(Engine):
    def __init__(self, model_name: str, spec: str) -> None:
        self._fn = _imported(model_name, spec)
        params = inspect.signature(self._fn).parameters
        self._any_keyword = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        self._names = frozenset(n for n in params if n not in _FIXED and n != next(iter(params), None))
        self._takes = {n for n in _FIXED if n in params}
        module = getattr(self._fn, "__module__", "") or ""
        self.info = EngineInfo(spec, f"python encoder {module}.{getattr(self._fn, '__qualname__', '?')}", "text")

    @property
    def option_names(self) -> frozenset[str]:
        return self._names

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
        try:
            out = self._fn([dict(m) for m in messages], **kwargs)
        except Exception as exc:
            raise refused(self.name, exc) from exc
        if isinstance(out, str):
            return Rendered(text=out)
        if isinstance(out, list | tuple) and all(isinstance(i, int) for i in out):
            self.info = EngineInfo(self.info.name, self.info.library, "ids")
            return Rendered(ids=list(out))
        raise RendererRefused(f"{self.name} returned {type(out).__name__}, not text or a list of token ids")
