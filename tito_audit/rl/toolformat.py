"""The assistant-turn format, learnt from the chat template itself: where tool calls, reasoning and content land.

Naive rollout code must turn a sampled completion back into a message before it can re-render it. Rather
than a parser per model family, we render known probe messages through the template (the project's sandboxed
``Renderer``) and read back the text around sentinel values: a call's name, arguments and id; the reasoning;
the content. The result is a sequence of literal pieces and slots that parses any completion in the same
format. A template that does not render tool calls has no call format (``reason`` says so), and its calls
stay in the content, which is what a re-render of that template can show anyway.
"""

from __future__ import annotations

import ast
import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tito_audit.errors import RenderError
from tito_audit.rendering.renderer import Renderer
from tito_audit.rollout.tokens import common_prefix_len

Message = dict[str, Any]

_NAMES = ("tito_probe_alpha", "tito_probe_beta")
_ARGS = ({"alpha_key": "alpha value"}, {"beta_key": "beta value"})
_IDS = ("a1b2c3d4e", "f5g6h7i8j")  # 9 alphanumerics: what the strictest templates (Mistral) accept
_CONTENT = "tito probe content"
_REASONING = "tito probe reasoning"
_USER = {"role": "user", "content": "tito probe question"}
_PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": "A probe tool.",
            "parameters": {"type": "object", "properties": {key: {"type": "string"} for key in args}},
        },
    }
    for name, args in zip(_NAMES, _ARGS, strict=True)
]
_SLOT_TEXT = re.compile(r"[\w.\-:]+")


@dataclass(frozen=True)
class Piece:
    kind: str  # "lit", "name", "args" or "id"
    text: str = ""


@dataclass
class ToolCallFormat:
    """How one template writes an assistant turn (``unit`` is one tool call; None when calls do not render)."""

    unit: tuple[Piece, ...] | None = None
    block_open: str = ""
    sep: str = ""
    block_close: str = ""
    content_to_calls: str = ""  # what the template writes between content and the first call
    args_as_string: bool = False  # the template renders only string arguments (verbatim)
    reasoning: tuple[str, str] | None = None  # text before and after the reasoning
    reasoning_field: str = "reasoning_content"
    content: tuple[str, str] = ("", "")  # text before and after the content
    max_calls: int | None = None  # calls one turn can show (None: any number)
    reason: str = ""  # why no call format was learnt
    notes: list[str] = field(default_factory=list)

    @property
    def parses_calls(self) -> bool:
        return self.unit is not None

    def describe(self) -> dict[str, Any]:
        return {
            "tool_calls": "".join(p.text if p.kind == "lit" else "{" + p.kind + "}" for p in self.unit)
            if self.unit
            else None,
            "block": [self.block_open, self.sep, self.block_close],
            "arguments": "string" if self.args_as_string else "object",
            "reasoning": list(self.reasoning) if self.reasoning else None,
            "content": list(self.content),
            "max_calls": self.max_calls,
            "reason": self.reason,
        }

    def can_show(self, calls: int) -> bool:
        return self.unit is not None and (self.max_calls is None or calls <= self.max_calls)

    # -- parsing ---------------------------------------------------------------------------------

    def _match_unit(self, text: str, pos: int) -> tuple[int, dict[str, Any]] | None:
        assert self.unit is not None
        i = pos
        got: dict[str, Any] = {}
        for k, piece in enumerate(self.unit):
            nxt = self.unit[k + 1].text if k + 1 < len(self.unit) and self.unit[k + 1].kind == "lit" else ""
            if piece.kind == "lit":
                if not text.startswith(piece.text, i):
                    return None
                i += len(piece.text)
            elif piece.kind in ("name", "id"):
                m = _SLOT_TEXT.match(text, i)
                if not m:
                    return None
                end = text.find(nxt, i) if nxt else m.end()
                if end != m.end():
                    return None
                got[piece.kind] = text[i:end]
                i = end
            else:
                parsed = _read_args(text, i, nxt)
                if parsed is None:
                    return None
                raw, obj, i = parsed
                got["args"] = raw if self.args_as_string else obj
        return i, got

    def find_calls(self, text: str) -> list[tuple[int, int, dict[str, Any]]]:
        """Every tool call in ``text``: (start, end, {name, args, id?})."""
        if self.unit is None:
            return []
        first = self.unit[0]
        starts = (
            [m.start() for m in re.finditer(re.escape(first.text), text)]
            if first.kind == "lit" and first.text
            else [m.start() for m in _SLOT_TEXT.finditer(text)]
        )
        out: list[tuple[int, int, dict[str, Any]]] = []
        for s in starts:
            if out and s < out[-1][1]:
                continue
            hit = self._match_unit(text, s)
            if hit is not None:
                out.append((s, hit[0], hit[1]))
        return out

    def parse(self, text: str, call_ids: Sequence[str] = ()) -> Message:
        """The assistant message naive rollout code would rebuild from a sampled completion ``text``."""
        msg: Message = {"role": "assistant", "content": ""}
        rest = text
        if self.reasoning is not None:
            ro, rc = self.reasoning
            head = rest.lstrip() if ro.strip() else rest
            if ro and head.startswith(ro) and rc in head[len(ro) :]:
                body = head[len(ro) :]
                cut = body.index(rc)
                msg[self.reasoning_field] = body[:cut].strip()
                rest = body[cut + len(rc) :]
        calls = self.find_calls(rest)
        if calls:
            kept, last = [], 0
            for s, e, _ in calls:
                kept.append(rest[last:s])
                last = e
            kept.append(rest[last:])
            head = kept[0].removesuffix(self.block_open) if self.block_open else kept[0]
            head = head.removesuffix(self.content_to_calls) if self.content_to_calls else head
            pieces = [head, *(p.removeprefix(self.sep) for p in kept[1:-1])]
            tail = kept[-1]
            pieces.append(tail.removeprefix(self.block_close) if self.block_close else tail)
            rest = "".join(pieces)
            msg["tool_calls"] = []
            for n, (_, _, got) in enumerate(calls):
                cid = got.get("id") or (call_ids[n] if n < len(call_ids) else f"call{n + 1:05d}")
                msg["tool_calls"].append(
                    {"id": cid, "type": "function", "function": {"name": got["name"], "arguments": got["args"]}}
                )
        co, cc = self.content
        if co and rest.startswith(co):
            rest = rest[len(co) :]
        if cc and rest.endswith(cc):
            rest = rest[: -len(cc)]
        # Exactly the text between the template's own literals: no strip (whitespace in content is content).
        msg["content"] = rest
        return msg


def _object_string(obj: Any) -> bool:
    """A JSON string holding a JSON object: string arguments as a template writes them (Qwen's ``tojson``)."""
    if not isinstance(obj, str):
        return False
    try:
        return isinstance(json.loads(obj), dict)
    except json.JSONDecodeError:
        return False


def _read_args(text: str, i: int, nxt: str) -> tuple[str, Any, int] | None:
    """Arguments at ``text[i:]``: a JSON object (or a JSON string holding one), else a Python dict literal up to
    the next literal piece."""
    try:
        obj, end = json.JSONDecoder().raw_decode(text, i)
        return (text[i:end], obj, end) if isinstance(obj, dict) or _object_string(obj) else None
    except json.JSONDecodeError:
        pass
    if not nxt:
        return None
    end = text.find(nxt, i)
    if end <= i:
        return None
    try:
        obj = ast.literal_eval(text[i:end])
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return (text[i:end], obj, end) if isinstance(obj, dict) else None  # arguments are an object


def _stop_texts(renderer: Renderer, stop_ids: Sequence[int]) -> list[str]:
    return [t for t in (renderer.tokenizer.convert_ids_to_tokens(int(i)) for i in stop_ids) if isinstance(t, str) and t]


def _turn_text(renderer: Renderer, message: Message, stops: Sequence[str], follow: Message | None) -> str | None:
    """The text a model emits for ``message`` as the reply to one user turn (up to the stop token)."""
    for after in ([], [follow]) if follow else ([],):
        try:
            prompt = renderer.render([_USER], tools=_PROBE_TOOLS, add_generation_prompt=True)
            full = renderer.render([_USER, message, *after], tools=_PROBE_TOOLS)
        except RenderError:
            continue
        start = common_prefix_len(prompt, full)
        if start < len(prompt):
            # The generation prompt is not a prefix of the history render (QwQ's forced "<think>\n"): the
            # shared characters may end inside a tag ("<t" of "<think>" and "<tool_call>"); back up to the
            # last line or tag end.
            start = max(full.rfind("\n", 0, start), full.rfind(">", 0, start)) + 1
        text = full[start:]
        hits = [text.find(s) for s in stops if s in text]
        return text[: min(hits)] if hits else text
    return None


def _locate_args(text: str, args: dict[str, Any], as_string: bool) -> tuple[int, int] | None:
    key = next(iter(args))
    k = text.find(key)
    if k < 0:
        return None
    for s in [m.start() for m in re.finditer(r"\{", text[:k])][::-1]:
        got = _read_args(text, s, "")
        if got is not None and got[1] == args and got[2] > k:
            return s, got[2]
    return None


def _pieces(text: str, calls: int, as_string: bool) -> list[Piece] | None:
    spans: list[tuple[int, int, str]] = []
    for n in range(calls):
        name_at = text.find(_NAMES[n])
        args_at = _locate_args(text, _ARGS[n], as_string)
        if name_at < 0 or args_at is None:
            return None
        spans += [(name_at, name_at + len(_NAMES[n]), "name"), (*args_at, "args")]
        id_at = text.find(_IDS[n])
        if id_at >= 0:
            spans.append((id_at, id_at + len(_IDS[n]), "id"))
    spans.sort()
    if any(b[0] < a[1] for a, b in itertools.pairwise(spans)):
        return None
    out: list[Piece] = []
    last = 0
    for a, b, kind in spans:
        out.append(Piece("lit", text[last:a]))
        out.append(Piece(kind))
        last = b
    out.append(Piece("lit", text[last:]))
    return out


def _common_suffix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return a[len(a) - n :]


def _call(n: int, as_string: bool) -> dict[str, Any]:
    args: Any = json.dumps(_ARGS[n]) if as_string else dict(_ARGS[n])
    return {"id": _IDS[n], "type": "function", "function": {"name": _NAMES[n], "arguments": args}}


def _tool_result(n: int) -> Message:
    return {"role": "tool", "tool_call_id": _IDS[n], "name": _NAMES[n], "content": "ok"}


def learn_format(renderer: Renderer, stop_ids: Sequence[int]) -> ToolCallFormat:
    """Render probe messages through the template and read back where each part lands."""
    stops = _stop_texts(renderer, stop_ids)
    fmt = ToolCallFormat()
    text = _turn_text(renderer, {"role": "assistant", "content": _CONTENT}, stops, None)
    if text is not None and _CONTENT in text:
        at = text.index(_CONTENT)
        fmt.content = (text[:at], text[at + len(_CONTENT) :])
    for field_name in ("reasoning_content", "thinking", "reasoning"):
        msg: Message = {"role": "assistant", "content": _CONTENT, field_name: _REASONING}
        text = _turn_text(renderer, msg, stops, None)
        if text and _REASONING in text and _CONTENT in text and text.index(_REASONING) < text.index(_CONTENT):
            r, c = text.index(_REASONING), text.index(_CONTENT)
            fmt.reasoning = (text[:r], text[r + len(_REASONING) : c])
            fmt.reasoning_field = field_name
            break
    one: list[Piece] | None = None
    content: str | None = ""
    msg = {}
    for as_string, content in ((False, ""), (True, ""), (False, None), (True, None)):
        msg = {"role": "assistant", "content": content, "tool_calls": [_call(0, as_string)]}
        text = _turn_text(renderer, msg, stops, _tool_result(0))
        if text is None or _NAMES[0] not in text:
            continue
        one = _pieces(text, 1, as_string)
        if one is not None:
            fmt.args_as_string = as_string
            break
    if one is None:
        fmt.reason = "the template does not render tool calls (name and arguments)"
        return fmt
    msg = {
        "role": "assistant",
        "content": content,
        "tool_calls": [_call(0, fmt.args_as_string), _call(1, fmt.args_as_string)],
    }
    text = _turn_text(renderer, msg, stops, _tool_result(0))
    two = _pieces(text, 2, fmt.args_as_string) if text else None
    core_len = len(one) - 2  # slots and the literals between them
    if two is not None and len(two) == 2 * core_len + 3 and two[1 : 1 + core_len] == one[1:-1]:
        lead, between, trail = two[0].text, two[1 + core_len].text, two[-1].text
        l_open = _common_suffix(lead, between)
        l_close = between[: common_prefix_len(between, trail)]
        l_close = l_close[: max(0, len(between) - len(l_open))]
        # Whitespace around a call belongs to the block, not the call (Qwen3: "\n\n<tool_call>" first).
        l_open, l_close = l_open.lstrip(), l_close.rstrip()
        fmt.block_open, fmt.block_close = lead[: len(lead) - len(l_open)], trail[len(l_close) :]
        fmt.sep = between[len(l_close) : len(between) - len(l_open)]
        fmt.unit = (Piece("lit", l_open), *one[1:-1], Piece("lit", l_close))
    else:
        fmt.notes.append("one call per turn (two calls do not render as two units)")
        fmt.unit = tuple(one)
        fmt.max_calls = 1
    msg = {"role": "assistant", "content": _CONTENT, "tool_calls": [_call(0, fmt.args_as_string)]}
    text = _turn_text(renderer, msg, stops, _tool_result(0))
    if text and _CONTENT in text:
        first = next((c for c in fmt.find_calls(text)), None)
        after = text.index(_CONTENT) + len(_CONTENT)
        if first is not None and first[0] >= after:
            fmt.content_to_calls = text[after : first[0]].removesuffix(fmt.block_open)
    return fmt
