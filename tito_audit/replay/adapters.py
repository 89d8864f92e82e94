"""Read real frameworks' dump formats as replay episodes. Field names come from the frameworks' own source.

- ``native``: the schema in ``tito_audit.replay.schema``.
- ``vllm``: one episode as the list of vLLM ``RequestOutput`` objects of its turns, serialized as JSON objects
  with vLLM's attribute names (vllm-project/vllm ``vllm/outputs.py``: ``RequestOutput.prompt_token_ids``,
  ``.outputs``; ``CompletionOutput.token_ids``, ``.logprobs``; ``vllm/logprobs.py``: ``SampleLogprobs =
  list[dict[int, Logprob]]``, ``Logprob.logprob``). vLLM writes no file itself, so the record is either that
  list, or an object ``{"requests": [...]}`` that may also carry the trainer's ``input_ids``/``loss_mask`` and
  the ``messages``/``tools``. Without trainer fields the trained sequence is the last turn's prompt plus its
  output (what the engine saw), with no loss mask.
- ``skyrl``: SkyRL's ``GeneratorOutput`` (NovaSky-AI/SkyRL ``skyrl-train/skyrl_train/generators/base.py``:
  ``prompt_token_ids``, ``response_ids``, ``loss_masks``, ``rollout_logprobs``), either the batch (lists of
  lists, one episode per row) or one trajectory per record (``TrajectoryOutput`` in
  ``skyrl_gym_generator.py``: ``prompt_ids``, ``response_ids``, ``loss_mask``, ``rollout_logprobs``). SkyRL keeps
  no per-turn sampled ids, so the turns are the runs of ``loss_mask`` = 1 (``Episode.turns_from_mask``): shapes,
  stop tokens and the non-canonical rate of the trained runs are measured, but the trained ids cannot be compared
  with what was sampled, so such an episode is not checked (``replay_incomplete``), never exact.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tito_audit.policy.view import mask_runs
from tito_audit.replay.schema import Episode, RecordError, SampledTurn, _floats, _ids, _mask, episode_from_native

ADAPTERS = ("auto", "native", "vllm", "skyrl")


def _is_list(x: Any) -> bool:
    return isinstance(x, Sequence) and not isinstance(x, (str, bytes))


def detect(record: Any) -> str:
    """Which adapter reads this record; ``RecordError`` when none does."""
    if _is_list(record) and record and all(isinstance(r, Mapping) and "outputs" in r for r in record):
        return "vllm"
    if not isinstance(record, Mapping):
        raise RecordError(
            f"a record must be a JSON object (or a list of vLLM RequestOutputs), not {type(record).__name__}"
        )
    if "turns" in record and "input_ids" in record:
        return "native"
    if "requests" in record:
        return "vllm"
    if "response_ids" in record and ("prompt_token_ids" in record or "prompt_ids" in record):
        return "skyrl"
    keys = ", ".join(sorted(map(str, record))[:8])
    raise RecordError(f"unknown record layout (keys: {keys}); use --map or --log-format (see docs/replay.md)")


def to_episodes(record: Any, line: int, fmt: str = "auto") -> list[Episode]:
    """The episodes in one record (a SkyRL batch holds several)."""
    kind = detect(record) if fmt == "auto" else fmt
    reader: Callable[[Any, int], list[Episode]] = {
        "native": lambda r, n: [episode_from_native(r, n)],
        "vllm": _vllm,
        "skyrl": _skyrl,
    }[kind]
    return reader(record, line)


# -- vLLM ------------------------------------------------------------------------------------------------------


def _sampled_logprobs(entries: Any, ids: list[int], where: str) -> list[float] | None:
    """vLLM's ``SampleLogprobs``: per position a ``{token_id: Logprob}`` dict (JSON keys are strings)."""
    if entries is None:
        return None
    if not _is_list(entries) or len(entries) != len(ids):
        raise RecordError(f"{where}: {len(entries) if _is_list(entries) else 'no'} logprob entries for {len(ids)} ids")
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


def _vllm(record: Any, line: int) -> list[Episode]:
    extra: Mapping[str, Any] = {}
    requests = record
    if isinstance(record, Mapping):
        extra, requests = record, record.get("requests")
    if not _is_list(requests) or not requests:
        raise RecordError("vllm: `requests` must be a non-empty list of RequestOutput objects")
    turns: list[SampledTurn] = []
    for k, req in enumerate(requests):
        if not isinstance(req, Mapping):
            raise RecordError(f"vllm: requests[{k}] is not an object")
        outputs = req.get("outputs")
        if not _is_list(outputs) or not outputs:
            raise RecordError(f"vllm: requests[{k}].outputs must be a non-empty list of CompletionOutput objects")
        out = outputs[0]
        if not isinstance(out, Mapping) or "token_ids" not in out:
            raise RecordError(f"vllm: requests[{k}].outputs[0] has no token_ids")
        ids = _ids(out["token_ids"], f"requests[{k}].outputs[0].token_ids")
        lps = _sampled_logprobs(out.get("logprobs"), ids, f"requests[{k}].outputs[0].logprobs")
        prompt = req.get("prompt_token_ids")
        prompt_ids = _ids(prompt, f"requests[{k}].prompt_token_ids") if prompt is not None else None
        turns.append(SampledTurn(ids, lps, prompt_ids))
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


# -- SkyRL -----------------------------------------------------------------------------------------------------


def _skyrl_one(prompt: Any, response: Any, mask: Any, logprobs: Any, line: int, where: str, rid: Any) -> Episode:
    p = _ids(prompt, f"{where}prompt_token_ids")
    r = _ids(response, f"{where}response_ids")
    if mask is None:
        raise RecordError(f"{where}loss_mask(s) missing: SkyRL trains where loss_mask is 1")
    m = _mask(mask, f"{where}loss_mask")
    lps = _floats(logprobs, f"{where}rollout_logprobs") if logprobs is not None else None
    notes = []
    if len(m) != len(r):
        notes.append(f"loss_mask has {len(m)} values for {len(r)} response ids")
    if lps is not None and len(lps) != len(r):
        notes.append(f"rollout_logprobs has {len(lps)} values for {len(r)} response ids")
        lps = None
    turns = [SampledTurn(r[a:b], lps[a:b] if lps is not None else None) for a, b in mask_runs(m[: len(r)])]
    return Episode(
        turns=turns,
        input_ids=[*p, *r],
        loss_mask=[0] * len(p) + m,
        id="" if rid is None else str(rid),
        line=line,
        source="skyrl",
        shape_notes=notes,
        turns_from_mask=True,
    )


def _skyrl(record: Any, line: int) -> list[Episode]:
    if not isinstance(record, Mapping):
        raise RecordError("skyrl: a record must be a JSON object")
    if "response_ids" not in record:
        keys = ", ".join(sorted(map(str, record))[:8])
        raise RecordError(f"skyrl: no response_ids in this record (keys: {keys})")
    prompt = record.get("prompt_token_ids", record.get("prompt_ids"))
    response = record["response_ids"]
    masks = record.get("loss_masks", record.get("loss_mask"))
    logprobs = record.get("rollout_logprobs")
    ids = record.get("trajectory_ids")
    batched = _is_list(response) and bool(response) and _is_list(response[0])
    if not batched:
        return [_skyrl_one(prompt, response, masks, logprobs, line, "", record.get("id"))]
    n = len(response)
    for name, col in (("prompt_token_ids", prompt), ("loss_masks", masks), ("rollout_logprobs", logprobs)):
        if col is not None and (not _is_list(col) or len(col) != n):
            raise RecordError(f"skyrl: {name} has {len(col) if _is_list(col) else 'no'} rows for {n} response_ids")
    out = []
    for i in range(n):
        rid: Any = ids[i] if ids is not None and _is_list(ids) and i < len(ids) else None
        if isinstance(rid, Mapping):
            rid = f"{rid.get('instance_id')}_{rid.get('repetition_id')}"
        out.append(
            _skyrl_one(
                prompt[i] if prompt is not None else [],
                response[i],
                masks[i] if masks is not None else None,
                logprobs[i] if logprobs is not None else None,
                line,
                f"row {i}: ",
                rid if rid is not None else f"{line}:{i}",
            )
        )
    return out
