"""One model's rendering and encoding, as its RL stack would do them, with caching and bounds.

Every render goes through ``tokenizer.apply_chat_template`` (transformers' ImmutableSandboxedEnvironment).
Templates that call ``strftime_now`` see a pinned date so that runs are reproducible; the date is swapped in
the compiled template's own globals, not by patching the clock.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from jinja2 import TemplateError
from jinja2.exceptions import SecurityError

from tito_audit.rendering.guard import RenderLimits, RenderTimeout, harden_environment, render_limits

DEFAULT_DATE = dt.datetime(2026, 1, 15, 12, 0, 0)
_PINNED_DATE: contextvars.ContextVar[dt.datetime] = contextvars.ContextVar("tito_audit_date", default=DEFAULT_DATE)

Message = dict[str, Any]


class RenderError(Exception):
    """A template refused or failed to render a conversation; ``kind`` classifies why."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind  # "raised" | "type" | "security" | "timeout" | "too_large" | "crash"
        self.message = message


def _pinned_strftime(fmt: str) -> str:
    return _PINNED_DATE.get().strftime(fmt)


def _install_pinned_clock(template: str) -> None:
    from transformers.utils.chat_template_utils import _compile_jinja_template

    compiled = _compile_jinja_template(template)
    compiled.environment.globals["strftime_now"] = _pinned_strftime
    harden_environment(compiled.environment)


@contextmanager
def pinned_date(when: dt.datetime) -> Iterator[None]:
    token = _PINNED_DATE.set(when)
    try:
        yield
    finally:
        _PINNED_DATE.reset(token)


def _key(messages: Sequence[Message], tools: Any, agp: bool, kwargs: dict[str, Any], date: dt.datetime) -> str:
    return json.dumps([messages, tools, agp, kwargs, date.isoformat()], sort_keys=True, default=repr)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


class Renderer:
    """Renders and encodes for one (tokenizer, template, template kwargs, date) combination."""

    def __init__(
        self,
        tokenizer: Any,
        chat_template: str,
        template_kwargs: dict[str, Any] | None = None,
        date: dt.datetime = DEFAULT_DATE,
        limits: RenderLimits | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.template_kwargs = dict(template_kwargs or {})
        self.date = date
        self.limits = limits or RenderLimits()
        self._cache: dict[str, str | RenderError] = {}
        self._ids_cache: dict[str, list[int] | RenderError] = {}
        _install_pinned_clock(chat_template)

    def with_kwargs(self, **template_kwargs: Any) -> Renderer:
        return Renderer(
            self.tokenizer,
            self.chat_template,
            {**self.template_kwargs, **template_kwargs},
            self.date,
            self.limits,
        )

    def with_date(self, date: dt.datetime) -> Renderer:
        return Renderer(self.tokenizer, self.chat_template, self.template_kwargs, date, self.limits)

    def _call(self, messages: Sequence[Message], tools: Any, agp: bool, **extra: Any) -> Any:
        with pinned_date(self.date), render_limits(self.limits):
            return self.tokenizer.apply_chat_template(
                list(messages),
                tools=tools,
                chat_template=self.chat_template,
                add_generation_prompt=agp,
                **extra,
                **self.template_kwargs,
            )

    def _guarded(self, messages: Sequence[Message], tools: Any, agp: bool, **extra: Any) -> Any:
        try:
            out = self._call(messages, tools, agp, **extra)
        except RenderTimeout as exc:
            raise RenderError("timeout", str(exc)) from exc
        except SecurityError as exc:
            raise RenderError("security", f"sandbox refused: {first_line(exc)}") from exc
        except TemplateError as exc:
            raise RenderError("raised", first_line(exc)) from exc
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, ZeroDivisionError) as exc:
            raise RenderError("type", f"{type(exc).__name__}: {first_line(exc)}") from exc
        except MemoryError as exc:
            raise RenderError("too_large", "render exhausted its memory budget") from exc
        except OverflowError as exc:  # the sandbox's MAX_RANGE, or arithmetic past any sane size
            raise RenderError("too_large", f"OverflowError: {first_line(exc)}") from exc
        except RecursionError as exc:
            raise RenderError("too_large", "render recursed too deeply") from exc
        except Exception as exc:
            raise RenderError("crash", f"{type(exc).__name__}: {first_line(exc)}") from exc
        size = len(out) if isinstance(out, str) else len(out.get("input_ids", out)) if hasattr(out, "get") else 0
        if size > self.limits.max_chars:
            raise RenderError("too_large", f"render produced {size:,} characters (limit {self.limits.max_chars:,})")
        return out

    def render(self, messages: Sequence[Message], tools: Any = None, add_generation_prompt: bool = False) -> str:
        """Rendered text; raises RenderError (cached, so a failing render is not retried)."""
        key = _key(messages, tools, add_generation_prompt, self.template_kwargs, self.date)
        hit = self._cache.get(key)
        if hit is None:
            try:
                hit = self._guarded(messages, tools, add_generation_prompt, tokenize=False)
            except RenderError as err:
                hit = err
            self._cache[key] = hit
        if isinstance(hit, RenderError):
            raise hit
        return hit

    def render_ids(
        self, messages: Sequence[Message], tools: Any = None, add_generation_prompt: bool = False
    ) -> list[int]:
        """Token ids of a render with control-token text in message content encoded as plain text.

        This is how environment messages must be encoded: a tool result that contains ``<|im_end|>`` must not
        become the control token. Falls back to plain encoding where the tokenizer cannot sanitize.
        """
        key = _key(messages, tools, add_generation_prompt, self.template_kwargs, self.date)
        hit = self._ids_cache.get(key)
        if hit is None:
            try:
                try:
                    out = self._guarded(
                        messages,
                        tools,
                        add_generation_prompt,
                        tokenize=True,
                        return_dict=False,
                        sanitize_control_tokens=True,
                    )
                except RenderError as err:
                    if err.kind not in ("type", "crash"):
                        raise
                    out = self.encode(self.render(messages, tools, add_generation_prompt))
                hit = list(out)
            except RenderError as err:
                hit = err
            self._ids_cache[key] = hit
        if isinstance(hit, RenderError):
            raise hit
        return hit

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Plain encoding, exactly what ``apply_chat_template(tokenize=True)`` does with rendered text."""
        return list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens))

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]

    def decode(self, ids: Sequence[int], **kwargs: Any) -> str:
        return str(self.tokenizer.decode(list(ids), **kwargs))

    def token_texts(self, ids: Sequence[int]) -> list[str]:
        """Each id decoded alone (what a token strip shows)."""
        return [self.tokenizer.decode([i], clean_up_tokenization_spaces=False) for i in ids]
