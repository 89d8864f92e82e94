"""The user's sampler settings (``--generation-kwargs``), parsed and checked without torch.

Pure sampling is temperature 1, top_k=0 (off), top_p=1, no min_new_tokens / min_length. Anything else samples
from a processed distribution q that is not the policy's pi, which biases the KL estimators (``kl_bias``) and is
what turns k1 negative. Kept torch-free so that ``rl`` can refuse bad settings before it loads anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from tito_audit.errors import UsageError

KNOWN_KEYS = frozenset({"temperature", "top_k", "top_p", "min_new_tokens", "max_new_tokens", "do_sample", "min_length"})


@dataclass(frozen=True)
class GenerationSettings:
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_new_tokens: int = 0
    max_new_tokens: int = 96
    min_length: int = 0  # transformers' min_length counts the prompt too
    # Token ids (the tokenizer's) the sampler may draw (None: all), and ids it never draws (single-token bad words):
    # masks applied to the logits before temperature, top-k and top-p, as vLLM's and transformers' processors are.
    allowed_token_ids: tuple[int, ...] | None = None
    banned_token_ids: tuple[int, ...] = ()

    @property
    def pure(self) -> bool:
        return (
            self.temperature == 1.0
            and self.top_k == 0
            and self.top_p >= 1.0
            and self.min_new_tokens == 0
            and self.min_length == 0
            and self.allowed_token_ids is None
            and not self.banned_token_ids
        )

    def min_new(self, prompt_len: int) -> int:
        """Stop tokens are suppressed for this many new tokens (min_length minus the prompt, as transformers)."""
        return max(self.min_new_tokens, self.min_length - prompt_len)

    def describe(self) -> str:
        if self.pure:
            return "pure sampling (temperature 1, no top-k/top-p, no minimum length)"
        parts = [
            f"temperature {self.temperature:g}" if self.temperature != 1.0 else "",
            f"top_k {self.top_k}" if self.top_k else "",
            f"top_p {self.top_p:g}" if self.top_p < 1.0 else "",
            f"min_new_tokens {self.min_new_tokens}" if self.min_new_tokens else "",
            f"min_length {self.min_length}" if self.min_length else "",
            f"allowed_token_ids ({len(self.allowed_token_ids)} ids)" if self.allowed_token_ids is not None else "",
            f"bad words ({len(self.banned_token_ids)} single-token ids)" if self.banned_token_ids else "",
        ]
        return ", ".join(p for p in parts if p)

    @classmethod
    def parse(cls, text: str | None, max_new_tokens: int) -> GenerationSettings:
        if not text:
            return cls(max_new_tokens=max_new_tokens)
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError("rl", f"--generation-kwargs is not JSON: {exc.msg}") from exc
        if not isinstance(raw, dict):
            raise UsageError("rl", "--generation-kwargs must be a JSON object")
        unknown = sorted(set(raw) - KNOWN_KEYS)
        if unknown:
            raise UsageError("rl", f"--generation-kwargs: unsupported key(s) {', '.join(unknown)}")
        if raw.get("do_sample") is False:
            raise UsageError("rl", "--generation-kwargs: do_sample=false (greedy) has no sampling distribution")
        try:
            s = cls(
                float(raw.get("temperature", 1.0)),
                int(raw.get("top_k", 0) or 0),
                float(raw.get("top_p", 1.0)),
                int(raw.get("min_new_tokens", 0) or 0),
                int(raw.get("max_new_tokens", max_new_tokens)),
                int(raw.get("min_length", 0) or 0),
            )
        except (TypeError, ValueError) as exc:
            raise UsageError("rl", f"--generation-kwargs: {exc}") from exc
        if s.temperature <= 0 or not 0 < s.top_p <= 1 or s.top_k < 0 or s.max_new_tokens < 1:
            raise UsageError(
                "rl",
                "--generation-kwargs: need temperature > 0, 0 < top_p <= 1, top_k >= 0, max_new_tokens >= 1",
            )
        return s
