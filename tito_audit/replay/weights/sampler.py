"""The sampler the engine drew from, as ``--sampling`` or a record's ``sampling`` object says: needed for the
exact bias of the KL estimators (``tito_audit.rl.kl_bias``), which depends on what the sampler does to pi.

Both transformers' names (``top_k``, ``top_p``, ``temperature``, ``min_new_tokens``, ``min_length``) and vLLM's
``SamplingParams`` names (``top_k=-1`` for off, ``min_tokens``) are read. Settings that do not change the
distribution (``n``, ``seed``, ``max_tokens``, ``stop``, ``logprobs``...) are ignored; one that does and that the
bias computation does not model (``min_p > 0``, a repetition or presence penalty) is refused with its name, never
silently dropped: the bias would be computed for another sampler than the user's. Torch-free, so that the CLI
refuses a bad ``--sampling`` before it loads anything.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tito_audit.rl.generation import GenerationSettings

# Keys that change nothing about which token is drawn, or only when the run ends.
IGNORED = frozenset(
    {
        "n", "best_of", "seed", "max_tokens", "max_new_tokens", "stop", "stop_token_ids", "logprobs",
        "prompt_logprobs", "detokenize", "skip_special_tokens", "spaces_between_special_tokens",
        "include_stop_str_in_output", "ignore_eos", "output_kind", "truncate_prompt_tokens", "do_sample",
        "logprobs_mode", "bad_words", "allowed_token_ids", "extra_args",
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
    known = {"temperature", "top_k", "top_p", "min_new_tokens", "min_tokens", "min_length", *IGNORED, *NEUTRAL}
    unknown = sorted(str(k) for k in raw if k not in known)
    if unknown:
        raise SamplingError(f"unsupported key(s) {', '.join(unknown)}")
    for key, neutral in NEUTRAL.items():
        if key in raw and raw[key] is not None and float(raw[key]) != neutral:
            raise SamplingError(f"{key}={raw[key]} changes the distribution in a way the bias does not model")
    if raw.get("do_sample") is False:
        raise SamplingError("do_sample=false (greedy) has no sampling distribution")
    try:
        temperature = float(raw.get("temperature", 1.0) if raw.get("temperature") is not None else 1.0)
        top_k = int(raw.get("top_k") or 0)
        top_p = float(raw.get("top_p", 1.0) if raw.get("top_p") is not None else 1.0)
        min_new = int(raw.get("min_new_tokens", raw.get("min_tokens")) or 0)
        min_length = int(raw.get("min_length") or 0)
    except (TypeError, ValueError) as exc:
        raise SamplingError(str(exc)) from None
    if top_k < 0:  # vLLM: -1 turns top-k off
        top_k = 0
    if temperature <= 0:
        raise SamplingError("temperature must be > 0 (0 is greedy: no sampling distribution)")
    if not 0 < top_p <= 1:
        raise SamplingError("top_p must be in (0, 1]")
    return GenerationSettings(temperature, top_k, top_p, min_new, 1, min_length)


def describe(settings: GenerationSettings | None) -> str:
    return "unknown" if settings is None else settings.describe()
