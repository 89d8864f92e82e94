"""What an assistant message carries that the model itself samples: its answer text, its reasoning, its calls'
names and string arguments. A stop token the template writes before any of them is inside the turn (an engine
stopping there cuts the message), not the turn's end; the text after a turn's real end is only the template's.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from tito_audit.rollout.call_arguments import arguments_dict

_TAG = re.compile(r"</?[A-Za-z_][\w:.-]{0,30}>")  # ``<think>``/``</think>`` in inline reasoning: not the model's words
_REASONING_KEYS = ("reasoning_content", "reasoning", "thinking")
_SHORTEST = 2  # shorter pieces (``.``, ``a``) could be any template's glue


def _texts(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):  # content as a list of parts
        return [str(p.get("text", "")) for p in value if isinstance(p, dict)]
    return []


def _arguments(arguments: Any) -> list[str]:
    """The string values of a call's arguments, nested objects' too; a string that is not arguments is one piece."""
    parsed = arguments_dict(arguments)
    if parsed is None:
        return [arguments] if isinstance(arguments, str) else []
    out: list[str] = []
    for value in parsed.values():
        out += [value] if isinstance(value, str) else _arguments(value) if isinstance(value, dict) else []
    return out


def _kept(pieces: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(p for p in pieces if len(p.strip()) >= _SHORTEST))


def _text_payloads(message: dict[str, Any]) -> tuple[str, ...]:
    """Content and reasoning line by line (inline ``<think>`` tags left out)."""
    pieces: list[str] = []
    for key in ("content", *_REASONING_KEYS):
        for text in _texts(message.get(key)):
            pieces += [line.strip() for part in _TAG.split(text) for line in part.splitlines()]
    return _kept(pieces)


def _call_payloads(call: Any) -> tuple[str, ...]:
    """A call's name and string arguments."""
    if not isinstance(call, dict):
        return ()
    nested = call.get("function")
    function: dict[str, Any] = nested if isinstance(nested, dict) else call
    return _kept([str(function.get("name") or ""), *_arguments(function.get("arguments"))])


def message_payloads(message: dict[str, Any]) -> tuple[str, ...]:
    """The pieces of text ``message`` (an assistant message) carries, each as a template writes it verbatim:
    content and reasoning line by line (inline ``<think>`` tags left out), each call's name and string argument."""
    pieces = [*_text_payloads(message)]
    for call in message.get("tool_calls") or []:
        pieces += _call_payloads(call)
    return tuple(dict.fromkeys(pieces))


def only_later_calls(message: dict[str, Any], cut: str) -> bool:
    """``cut`` (what a render writes of ``message`` after a stop) holds only calls after the message's first one: the
    template writes each of parallel calls as a turn of its own (harmony's ``...<|call|><|start|>assistant to=...``),
    so an engine samples them one per turn. Not so where the cut holds the message's text or reasoning, or its
    first call (the stop is before it)."""
    calls = message.get("tool_calls") or []
    if len(calls) < 2 or payload_in(cut, _text_payloads(message)) is not None:
        return False
    later = {p for call in calls[1:] for p in _call_payloads(call)}
    first = tuple(p for p in _call_payloads(calls[0]) if p not in later)  # what names the first call alone
    return payload_in(cut, first) is None


_KEPT_PIECE = 256  # characters: a pattern for a piece up to this long is kept (``_pattern_kept``); longer, built anew


def _pattern(piece: str) -> re.Pattern[str]:
    """``piece`` verbatim or JSON-escaped, not as part of a longer word (an argument ``en`` is no payload inside
    ``<|endoftext|>``)."""
    return _pattern_kept(piece) if len(piece) <= _KEPT_PIECE else _built(piece)


@lru_cache(maxsize=4096)
def _pattern_kept(piece: str) -> re.Pattern[str]:
    """``_built``, kept: an audit looks for the same scenario texts in every render of every turn."""
    return _built(piece)


def _built(piece: str) -> re.Pattern[str]:
    forms = dict.fromkeys((piece, json.dumps(piece)[1:-1], json.dumps(piece, ensure_ascii=False)[1:-1]))
    head = r"(?<!\w)" if re.match(r"\w", piece[:1]) else ""
    tail = r"(?!\w)" if re.match(r"\w", piece[-1:]) else ""
    return re.compile(head + "(?:" + "|".join(re.escape(f) for f in forms) + ")" + tail)


def payload_in(text: str, payloads: tuple[str, ...]) -> str | None:
    """The first of ``payloads`` that ``text`` holds as a whole word or more (verbatim or JSON-escaped), or None."""
    for piece in payloads:
        if _pattern(piece).search(text):
            return piece
    return None
