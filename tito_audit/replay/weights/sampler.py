"""The sampler the engine drew from, as ``--sampling`` or a record's ``sampling`` object says: needed for the
exact bias of the KL estimators (``tito_audit.policy.kl_bias``), which depends on what the sampler does to pi.

Both transformers' names (``top_k``, ``top_p``, ``temperature``, ``min_new_tokens``, ``min_length``) and vLLM's
``SamplingParams`` names (``top_k=-1`` for off, ``min_tokens``) are read. Settings that do not change the
distribution (``n``, ``seed``, ``max_tokens``, ``stop``, ``logprobs``...) are ignored. ``allowed_token_ids`` and
single-token ``bad_words_ids`` are modelled (masks before temperature, top-k, top-p). One that changes the
distribution and that the bias computation does not model (``min_p > 0``, a repetition or presence penalty, a
multi-token bad word, vLLM's ``bad_words`` strings) is refused with its name, never silently dropped: the bias
would be computed for another sampler than the user's. Torch-free, so that the CLI
refuses a bad ``--sampling`` before it loads anything.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from tito_audit.policy.generation import GenerationSettings

# Keys that change nothing about which token is drawn, or only when the run ends.
IGNORED = frozenset(
    {
        "n", "best_of", "seed", "max_tokens", "max_new_tokens", "stop", "stop_token_ids", "logprobs",
        "prompt_logprobs", "detokenize", "skip_special_tokens", "spaces_between_special_tokens",
        "include_stop_str_in_output", "ignore_eos", "output_kind", "truncate_prompt_tokens", "do_sample",
        "logprobs_mode", "extra_args",
    }
)  # fmt: skip
# Keys the bias computation does not model: accepted only at their neutral value.
NEUTRAL = {"min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "typical_p": 1.0}


class SamplingError(ValueError):
    """Sampler settings that cannot be used (the message names the key)."""


def parse_sampling(raw: Any) -> GenerationSettings:
    """``GenerationSettings`` from a JSON object (or JSON text holding one); ``SamplingError`` naming the key."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise SamplingError(f"not JSON: {exc.msg}") from None
    if not isinstance(raw, Mapping):
        raise SamplingError(f"must be a JSON object, not {type(raw).__name__}")
    known = {
        "temperature", "top_k", "top_p", "min_new_tokens", "min_tokens", "min_length", "allowed_token_ids",
        "bad_words_ids", *IGNORED, *NEUTRAL,
    }  # fmt: skip
    if raw.get("bad_words"):
        raise SamplingError(
            "bad_words (strings) change the distribution and are not modelled (their tokens depend on the context): "
            "give bad_words_ids (single-token lists are modelled)"
        )
    unknown = sorted(str(k) for k in raw if k not in known)
    if unknown:
        raise SamplingError(f"unsupported key(s) {', '.join(unknown)}")
    for key, neutral in NEUTRAL.items():
        if key in raw and raw[key] is not None and _number(raw, key, neutral) != neutral:
            raise SamplingError(f"{key}={raw[key]} changes the distribution in a way the bias does not model")
    if raw.get("do_sample") is False:
        raise SamplingError("do_sample=false (greedy) has no sampling distribution")
    temperature = _number(raw, "temperature", 1.0)
    top_k = int(_number(raw, "top_k", 0, integer=True))
    top_p = _number(raw, "top_p", 1.0)
    min_key = "min_new_tokens" if raw.get("min_new_tokens") is not None else "min_tokens"
    min_new = int(_number(raw, min_key, 0, integer=True))
    min_length = int(_number(raw, "min_length", 0, integer=True))
    if top_k < 0:  # vLLM: -1 turns top-k off
        top_k = 0
    if temperature <= 0:
        raise SamplingError("temperature must be > 0 (0 is greedy: no sampling distribution)")
    if not 0 < top_p <= 1:
        raise SamplingError("top_p must be in (0, 1]")
    allowed = _ids(raw, "allowed_token_ids")
    if allowed is not None and not allowed:
        raise SamplingError("allowed_token_ids is empty: the sampler could draw nothing")
    banned: list[int] = []
    for word in raw.get("bad_words_ids") or []:
        ids = _ids({"bad_words_ids": word}, "bad_words_ids") or []
        if len(ids) != 1:
            raise SamplingError(
                f"bad_words_ids {json.dumps(word)}: a multi-token bad word bans a token only after the others, which "
                "the bias does not model"
            )
        banned.extend(ids)
    return GenerationSettings(
        temperature, top_k, top_p, min_new, 1, min_length,
        tuple(sorted(set(allowed))) if allowed is not None else None, tuple(sorted(set(banned))),
    )  # fmt: skip


def _ids(raw: Mapping[str, Any], key: str) -> list[int] | None:
    """A JSON list of token ids (non-negative integers, no bools), or None when absent."""
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in value):
        raise SamplingError(f"{key} must be a list of token ids, not {json.dumps(value)[:80]}")
    return list(value)


def _number(raw: Mapping[str, Any], key: str, default: float, *, integer: bool = False) -> float:
    """A finite JSON number (an integer where ``integer``); a bool, a string, NaN or infinity is refused by name."""
    value = raw.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SamplingError(f"{key} must be a number, not {json.dumps(value)}")
    if not math.isfinite(value):
        raise SamplingError(f"{key} must be a finite number, not {value}")
    if integer and value != int(value):
        raise SamplingError(f"{key} must be an integer, not {value}")
    return value


def describe(settings: GenerationSettings | None) -> str:
    return "unknown" if settings is None else settings.describe()
