"""The native replay record: one episode of a rollout log, as the rollout code kept it.

One JSON object (a JSONL line or a Parquet row) per episode::

    {
      "id": "ep-17",                                  # optional, shown in findings
      "messages": [...], "tools": [...],              # chat format, tool_calls as the rollout code kept them
      "turns": [{"ids": [...], "logprobs": [...]}],   # per assistant turn: the ids the engine sampled
      "input_ids": [...], "loss_mask": [...],         # what the trainer trained on
      "chat_template_kwargs": {"enable_thinking": false},  # optional, how the prompt was rendered
      "date": "2026-07-26"                            # optional, the date the template saw (strftime_now)
    }

Each turn may also carry ``prompt_ids``, the ids the engine was given for it: with them the engine's own context
is the reference (``tito_audit.replay.engine``) and the template's rendering only measures context drift.

``messages`` and ``tools`` are optional: without them only the token-level checks run (no reference buffer, no
"what if"). ``messages``, ``tools`` and ``chat_template_kwargs`` may also be JSON text (a string holding the list or
object): Parquet has no column type for free-form objects, so ``tito_audit.replay.LogWriter`` stores them that way.
Other layouts are mapped onto these names (``--map``, ``tito_audit.replay.mapping``) or read by an adapter
(``tito_audit.replay.adapters``). Validation raises ``RecordError`` naming the field at fault; the
reader turns it into a counted, numbered line and goes on.
"""

from __future__ import annotations

import datetime as dt
import json
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tito_audit.rollout.tokens import log_probs, token_ids

Message = dict[str, Any]
NATIVE_FIELDS = ("id", "messages", "tools", "turns", "input_ids", "loss_mask", "chat_template_kwargs", "date")


class RecordError(ValueError):
    """A record that cannot be replayed; the message names the field."""


@dataclass
class SampledTurn:
    """One assistant turn as the engine produced it."""

    ids: list[int]
    logprobs: list[float] | None = None
    prompt_ids: list[int] | None = None  # what the engine was given for this turn, when the log has it


@dataclass
class Episode:
    """One replayable episode (the native record, validated)."""

    turns: list[SampledTurn]
    input_ids: list[int]
    loss_mask: list[int] | None
    messages: list[Message] | None = None
    tools: list[dict[str, Any]] | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    id: str = ""
    line: int = 0  # 1-based line (JSONL) or row (Parquet) of the record in the log
    source: str = "native"  # the adapter that read it
    shape_notes: list[str] = field(default_factory=list)  # length mismatches an adapter found in the raw record
    date: dt.datetime | None = None  # the date the engine's template saw, when the log says
    file: str = ""  # the log file, when a replay reads several
    turns_from_mask: bool = False  # the turns are the trained mask's runs, not the engine's ids (SkyRL keeps none)
    trainer_logged: bool = True  # False: no trained sequence in the log, the engine's last prompt + output stand in


def parse_date(value: Any) -> dt.datetime:
    """``YYYY-MM-DD`` (noon, as the audit's ``--date``) or an ISO date-time; ``RecordError`` otherwise."""
    if isinstance(value, str):
        try:
            if len(value) == 10:
                return dt.datetime.combine(dt.date.fromisoformat(value), dt.time(12))
            return dt.datetime.fromisoformat(value)
        except ValueError:
            pass
    raise RecordError(f"date must be an ISO date (YYYY-MM-DD) or date-time, not {value!r:.40}")


def is_list(x: Any) -> bool:
    """A JSON array as a record holds it (any sequence but text)."""
    return isinstance(x, Sequence) and not isinstance(x, (str, bytes))


def _packed(value: list[Any], code: str) -> array | None:
    """``value`` as a C array of ``code`` (``L``: integers >= 0, ``B``: 0..255), checked in C; None when a value is
    not one (a float, a negative, a string, None). A bool passes as 0/1: callers that must refuse it check."""
    try:
        return array(code, value)
    except (TypeError, OverflowError, ValueError):
        return None


def _ids(value: Any, where: str, compared: bool = False) -> list[int]:
    """Token ids (``rollout.tokens.token_ids``, the buffer's own check), a ``RecordError`` naming the field."""
    try:
        return token_ids(value, where, compared)
    except ValueError as exc:
        raise RecordError(str(exc)) from None


def _floats(value: Any, where: str) -> list[float]:
    """Log-probs (``rollout.tokens.log_probs``, the buffer's own check), a ``RecordError`` naming the field."""
    try:
        return log_probs(value, where)
    except ValueError as exc:
        raise RecordError(str(exc)) from None


def _mask(value: Any, where: str) -> list[int]:
    if type(value) is list:
        packed = _packed(value, "B")
        only_01 = packed is not None and not packed.tobytes().translate(None, b"\x00\x01")
        if only_01 and bool not in set(map(type, value)):
            return value
    ids = _ids(value, where)
    bad = next((v for v in ids if v not in (0, 1)), None)
    if bad is not None:
        raise RecordError(f"{where} must hold 0/1 (found {bad})")
    return ids


def _json_text(value: Any, where: str) -> Any:
    """``messages``, ``tools`` and ``chat_template_kwargs`` may be JSON text: how a Parquet writer keeps them as one
    string column, without a struct schema (an Arrow struct cannot tell an absent key from a null one, and a
    template renders the two differently)."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise RecordError(f"{where} is text but not JSON ({exc.msg} at column {exc.colno})") from None


def context_fields(
    record: Mapping[str, Any], n_turns: int
) -> tuple[list[Message] | None, list[dict[str, Any]] | None, dict[str, Any], dt.datetime | None]:
    """``messages``, ``tools``, ``chat_template_kwargs`` and ``date`` of a record, validated (``RecordError``):
    one function for every reader, so that a record refused on one path (JSONL) is refused on all (Arrow)."""
    messages = _json_text(record.get("messages"), "messages")
    if messages is not None:
        if not isinstance(messages, Sequence) or not all(isinstance(m, Mapping) and "role" in m for m in messages):
            raise RecordError("messages must be a list of {role, content, ...} objects")
        messages = [dict(m) for m in messages]
        assistants = sum(1 for m in messages if m.get("role") == "assistant")
        if assistants != n_turns:
            raise RecordError(f"{assistants} assistant message(s) but {n_turns} sampled turn(s)")
    tools = _json_text(record.get("tools"), "tools")
    listed = isinstance(tools, Sequence) and not isinstance(tools, (str, bytes))
    if tools is not None and (not listed or not all(isinstance(t, Mapping) for t in tools)):
        raise RecordError("tools must be a list of tool schemas (objects)")
    kwargs = _json_text(record.get("chat_template_kwargs"), "chat_template_kwargs") or {}
    if not isinstance(kwargs, Mapping):
        raise RecordError("chat_template_kwargs must be an object")
    date = record.get("date")
    return (
        messages,
        [dict(t) for t in tools] if tools else None,
        dict(kwargs),
        parse_date(date) if date is not None else None,
    )


def episode_from_native(record: Mapping[str, Any], line: int = 0, source: str = "native") -> Episode:
    """Validate one native record; ``RecordError`` names the first problem."""
    if not isinstance(record, Mapping):
        raise RecordError(f"a record must be a JSON object, not {type(record).__name__}")
    missing = [k for k in ("turns", "input_ids") if k not in record or record[k] is None]
    if missing:
        raise RecordError(f"missing field(s) {', '.join(missing)} (native schema: see docs/replay.md)")
    raw_turns = record["turns"]
    if not isinstance(raw_turns, Sequence) or isinstance(raw_turns, (str, bytes)):
        raise RecordError("turns must be a list of {ids, logprobs?}")
    turns: list[SampledTurn] = []
    for k, t in enumerate(raw_turns):
        if isinstance(t, Mapping):
            if "ids" not in t:
                raise RecordError(f"turns[{k}] has no ids")
            ids = _ids(t["ids"], f"turns[{k}].ids")
            lps = t.get("logprobs")
            logprobs = _floats(lps, f"turns[{k}].logprobs") if lps is not None else None
            prompt = t.get("prompt_ids")
            prompt_ids = _ids(prompt, f"turns[{k}].prompt_ids", compared=True) if prompt is not None else None
        else:
            ids, logprobs, prompt_ids = _ids(t, f"turns[{k}]"), None, None
        turns.append(SampledTurn(ids, logprobs, prompt_ids))
    input_ids = _ids(record["input_ids"], "input_ids")
    mask_raw = record.get("loss_mask")
    loss_mask = _mask(mask_raw, "loss_mask") if mask_raw is not None else None
    messages, tools, kwargs, date = context_fields(record, len(turns))
    rid = record.get("id")
    return Episode(
        turns=turns,
        input_ids=input_ids,
        loss_mask=loss_mask,
        messages=messages,
        tools=tools,
        template_kwargs=kwargs,
        id="" if rid is None else str(rid),
        line=line,
        source=source,
        date=date,
    )


def episode_to_native(ep: Episode) -> dict[str, Any]:
    """The native record of an episode (what ``tito_audit.replay.record_from_trajectory`` writes)."""
    out: dict[str, Any] = {
        "turns": [
            {k: v for k, v in (("ids", t.ids), ("logprobs", t.logprobs), ("prompt_ids", t.prompt_ids)) if v is not None}
            for t in ep.turns
        ],
        "input_ids": ep.input_ids,
    }
    if ep.id:
        out["id"] = ep.id
    if ep.loss_mask is not None:
        out["loss_mask"] = ep.loss_mask
    if ep.messages is not None:
        out["messages"] = ep.messages
    if ep.tools is not None:
        out["tools"] = ep.tools
    if ep.template_kwargs:
        out["chat_template_kwargs"] = ep.template_kwargs
    if ep.date is not None:
        out["date"] = ep.date.isoformat()
    return out
