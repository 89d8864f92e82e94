"""The vLLM log format: a list of ``RequestOutput`` objects per episode.

One episode is the list of the ``RequestOutput`` objects of its turns, each serialized as an object with
vLLM's attribute names: ``RequestOutput.prompt_token_ids``, ``RequestOutput.outputs``, ``CompletionOutput.token_ids``,
``CompletionOutput.logprobs`` (vllm-project/vllm ``vllm/outputs.py``), where ``logprobs`` is ``SampleLogprobs =
list[dict[int, Logprob]]`` with ``Logprob.logprob`` (``vllm/logprobs.py``; JSON makes the token-id keys strings).
vLLM writes no file itself, so a record is either that list, or ``{"requests": [...], "input_ids": ...,
"loss_mask": ..., "messages": ..., "tools": ...}`` with the trainer's fields beside it. Without trainer fields the
trained sequence is the last turn's ``prompt_token_ids`` plus its output: replay then checks the context the engine
was given (every earlier turn's sampled ids verbatim), with no loss mask.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tito_audit.registry import LOG_FORMATS
from tito_audit.replay.schema import Episode, RecordError, SampledTurn, _ids, episode_from_native, is_list


def recognises(record: Any) -> bool:
    """A list of ``RequestOutput`` objects, or an object holding them under ``requests``."""
    if is_list(record):
        return bool(record) and all(isinstance(r, Mapping) and "outputs" in r for r in record)
    return isinstance(record, Mapping) and "requests" in record


def _sampled_logprobs(entries: Any, ids: list[int], where: str) -> list[float] | None:
    """vLLM's ``SampleLogprobs``: per position a ``{token_id: Logprob}`` dict (JSON keys are strings)."""
    if entries is None:
        return None
    if not is_list(entries) or len(entries) != len(ids):
        raise RecordError(f"{where}: {len(entries) if is_list(entries) else 'no'} logprob entries for {len(ids)} ids")
    out: list[float] = []
    for pos, (tid, entry) in enumerate(zip(ids, entries, strict=True)):
        if not isinstance(entry, Mapping):
            raise RecordError(f"{where}[{pos}] must be a {{token_id: Logprob}} object")
        hit = entry.get(str(tid), entry.get(tid))
        if hit is None:
            raise RecordError(f"{where}[{pos}] has no entry for the sampled token {tid}")
        value = hit.get("logprob") if isinstance(hit, Mapping) else hit
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise RecordError(f"{where}[{pos}][{tid}] has no numeric logprob")
        out.append(float(value))
    return out


def _turns(requests: Any) -> list[SampledTurn]:
    if not is_list(requests) or not requests:
        raise RecordError("vllm: `requests` must be a non-empty list of RequestOutput objects")
    turns: list[SampledTurn] = []
    for k, req in enumerate(requests):
        if not isinstance(req, Mapping):
            raise RecordError(f"vllm: requests[{k}] is not an object")
        outputs = req.get("outputs")
        if not is_list(outputs) or not outputs:
            raise RecordError(f"vllm: requests[{k}].outputs must be a non-empty list of CompletionOutput objects")
        out = outputs[0]
        if not isinstance(out, Mapping) or "token_ids" not in out:
            raise RecordError(f"vllm: requests[{k}].outputs[0] has no token_ids")
        ids = _ids(out["token_ids"], f"requests[{k}].outputs[0].token_ids")
        lps = _sampled_logprobs(out.get("logprobs"), ids, f"requests[{k}].outputs[0].logprobs")
        prompt = req.get("prompt_token_ids")
        prompt_ids = _ids(prompt, f"requests[{k}].prompt_token_ids") if prompt is not None else None
        turns.append(SampledTurn(ids, lps, prompt_ids))
    return turns


def read(record: Any, line: int) -> list[Episode]:
    extra: Mapping[str, Any] = {}
    requests = record
    if isinstance(record, Mapping):
        extra, requests = record, record.get("requests")
    turns = _turns(requests)
    native: dict[str, Any] = {
        k: extra[k] for k in ("id", "messages", "tools", "chat_template_kwargs", "date") if k in extra
    }
    native["turns"] = [{"ids": t.ids, "logprobs": t.logprobs, "prompt_ids": t.prompt_ids} for t in turns]
    if "input_ids" in extra:
        native["input_ids"], native["loss_mask"] = extra["input_ids"], extra.get("loss_mask")
    else:
        last = turns[-1]
        if last.prompt_ids is None:
            raise RecordError("vllm: no trainer input_ids and no prompt_token_ids to rebuild the context from")
        native["input_ids"] = [*last.prompt_ids, *last.ids]
    ep = episode_from_native(native, line, source="vllm")
    ep.trainer_logged = "input_ids" in extra
    for t, src in zip(ep.turns, turns, strict=True):
        t.prompt_ids = src.prompt_ids
    return [ep]


LOG_FORMATS.register(
    "vllm",
    "vLLM RequestOutputs, one list per episode (with the trainer's fields beside them, or not)",
    read,
    doc=__doc__,
    order=20,
    meta={"recognises": recognises, "not_an_object": "a list of vLLM RequestOutputs", "title": "vLLM"},
)
