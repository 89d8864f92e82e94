"""The SkyRL log format: ``GeneratorOutput`` or ``TrajectoryOutput``.

``GeneratorOutput`` (NovaSky-AI/SkyRL ``skyrl-train/skyrl_train/generators/base.py``:
``prompt_token_ids``, ``response_ids``, ``loss_masks``, ``rollout_logprobs``), either a whole batch per record
(lists of lists, one episode per row) or one trajectory per record (``TrajectoryOutput`` in
``skyrl_gym_generator.py``: ``prompt_ids``, ``response_ids``, ``loss_mask``, ``rollout_logprobs``). The trained
sequence is prompt + response with the mask over the response. SkyRL keeps no per-turn sampled ids, so its turns
are the runs of ``loss_mask`` = 1 (``Episode.turns_from_mask``), and the trained ids could only be compared with
themselves: shapes and the non-canonical rate of the trained runs are measured, but every SkyRL episode is **not
checked** (``replay_incomplete``, verdict ``error``, exit 3), never exact. To check a SkyRL loop, log the engine's
ids per turn (``examples/skyrl_generator.py`` writes native records) or pair the dump with them via
``--map turns=...``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tito_audit.policy.view import mask_runs
from tito_audit.registry import LOG_FORMATS
from tito_audit.replay.schema import Episode, RecordError, SampledTurn, _floats, _ids, _mask, is_list


def recognises(record: Any) -> bool:
    """Response ids beside prompt ids, under either of SkyRL's names for them."""
    return (
        isinstance(record, Mapping)
        and "response_ids" in record
        and ("prompt_token_ids" in record or "prompt_ids" in record)
    )


def _one(prompt: Any, response: Any, mask: Any, logprobs: Any, line: int, where: str, rid: Any) -> Episode:
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


def read(record: Any, line: int) -> list[Episode]:
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
    batched = is_list(response) and bool(response) and is_list(response[0])
    if not batched:
        return [_one(prompt, response, masks, logprobs, line, "", record.get("id"))]
    n = len(response)
    for name, col in (("prompt_token_ids", prompt), ("loss_masks", masks), ("rollout_logprobs", logprobs)):
        if col is not None and (not is_list(col) or len(col) != n):
            raise RecordError(f"skyrl: {name} has {len(col) if is_list(col) else 'no'} rows for {n} response_ids")
    out = []
    for i in range(n):
        rid: Any = ids[i] if ids is not None and is_list(ids) and i < len(ids) else None
        if isinstance(rid, Mapping):
            rid = f"{rid.get('instance_id')}_{rid.get('repetition_id')}"
        out.append(
            _one(
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


LOG_FORMATS.register(
    "skyrl",
    "SkyRL's GeneratorOutput (a batch per record) or TrajectoryOutput (one trajectory per record)",
    read,
    doc=__doc__,
    order=30,
    meta={"recognises": recognises, "title": "SkyRL"},
)
