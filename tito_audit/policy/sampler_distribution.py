"""The distribution q a sampler actually draws from, given the policy's logits and the user's settings.

Padding rows past the tokenizer are no tokens (``mask_padding``: the policy's pi is over the rest). Then the
processing as transformers orders it: stop tokens suppressed while fewer than ``min_new`` tokens are out,
temperature, top-k, top-p; the compacted vocabulary's shared row, which the sampler never emits, is removed
last. The sampler draws from ``softmax`` of what ``process_logits`` returns; ``kl_bias`` takes the same q to
compute what each KL estimator averages to under it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tito_audit.policy.generation import GenerationSettings


def process_logits(
    logits: torch.Tensor,
    settings: GenerationSettings,
    suppress_stop: torch.Tensor | None = None,
    stop_ids: Sequence[int] = (),
    never: Sequence[int] = (),
    blocked: torch.Tensor | None = None,
) -> torch.Tensor:
    """Processed logits [rows, vocab] (-inf where q is 0) of logits whose padding rows are already masked
    (``mask_padding``). ``suppress_stop`` [rows] bool: rows whose stop ids are still suppressed (min_new_tokens /
    min_length); ``never``: model ids the sampler never emits; ``blocked`` [vocab] bool: model ids the settings
    forbid (``allowed_token_ids``, bad words), masked first as the engines' logits processors do."""
    if blocked is not None:
        logits = logits.masked_fill(blocked.to(logits.device), float("-inf"))
    x = logits / settings.temperature
    if suppress_stop is not None and stop_ids and bool(suppress_stop.any()):
        x = x.clone()
        cols = torch.tensor(list(stop_ids), device=x.device)
        x[suppress_stop.nonzero()[:, 0][:, None], cols[None, :]] = float("-inf")
    if 0 < settings.top_k < x.shape[-1]:
        kth = torch.topk(x, settings.top_k, dim=-1).values[:, -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    if settings.top_p < 1.0:
        # transformers' TopPLogitsWarper, step for step (vLLM's rule is the same): ascending order, a token is
        # dropped when the mass up to and including it is <= 1 - top_p (so the token at which the mass reaches
        # top_p exactly is dropped), the most likely token always kept.
        sorted_x, order = torch.sort(x, descending=False)
        drop_sorted = sorted_x.softmax(-1).cumsum(-1) <= (1 - settings.top_p)
        drop_sorted[..., -1:] = False
        x = x.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), float("-inf"))
    if never:
        x = x.clone()
        x[:, list(never)] = float("-inf")
    return x


def mask_padding(logits: torch.Tensor, valid: int | None) -> torch.Tensor:
    """Rows from ``valid`` on are embedding padding (a vocabulary rounded up to 64 or 128), no tokens: -inf."""
    if valid is None or valid >= logits.shape[-1]:
        return logits
    return torch.cat([logits[..., :valid], torch.full_like(logits[..., valid:], float("-inf"))], -1)
