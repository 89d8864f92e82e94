"""``--tokenizer auto``: pick, per template, the candidate tokenizer whose special tokens the template
writes.

Forks and fine-tunes share their base model's vocabulary, so the control-token text a template writes
literally (``<|im_start|>``, ``[INST]``, ``<｜Assistant｜>``...) says which vocabulary it was written for.
Each candidate scores the number of its added tokens that occur in the template's literal text; the best
score wins, ties go to the candidate with fewer control-token literals it lacks, then to the order the
candidates were given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from tito_audit.sources.control_tokens import control_literals, missing_tokens


@dataclass(frozen=True)
class Candidate:
    name: str
    added: frozenset[str]  # added-token text (special or not), at least 3 characters

    @cached_property
    def _by_head(self) -> dict[str, list[str]]:
        """``added`` by its first three characters (the tokens shorter than that are ``_short``)."""
        heads: dict[str, list[str]] = {}
        for token in self.added:
            if len(token) >= 3:
                heads.setdefault(token[:3], []).append(token)
        return heads

    @cached_property
    def _short(self) -> list[str]:
        return [token for token in self.added if len(token) < 3]

    def count_in(self, text: str, heads: set[str]) -> int:
        """How many of ``added`` occur in ``text`` (``heads``: every 3 characters of it), each looked for only
        where its first three characters occur: a candidate has hundreds, a template a few."""
        by_head = self._by_head
        short = sum(1 for token in self._short if token in text)
        return short + sum(1 for head in heads & by_head.keys() for token in by_head[head] if token in text)

    @classmethod
    def of(cls, name: str, tokenizer: Any, hidden: frozenset[str] = frozenset()) -> Candidate:
        decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        texts = {t.content for t in decoder.values() if len(t.content.strip()) >= 3 and t.content not in hidden}
        for attr in ("bos_token", "eos_token"):
            tok = getattr(tokenizer, attr, None)
            if isinstance(tok, str) and len(tok) >= 3:
                texts.add(tok)
        return cls(name, frozenset(texts))


@dataclass(frozen=True)
class Choice:
    name: str
    score: int
    reason: str


def pick(
    literal: str,
    candidates: Sequence[Candidate],
    tokenizers: dict[str, Any] | None = None,
    hidden: dict[str, frozenset[str]] | None = None,
) -> Choice:
    """The candidate that best matches a template's literal text (from ``hazards.literal_text``)."""
    if not candidates:
        raise ValueError("no candidate tokenizers")
    controls = control_literals(literal)
    heads = {literal[i : i + 3] for i in range(len(literal) - 2)}
    best: tuple[int, int, int] | None = None
    chosen = candidates[0]
    for order, cand in enumerate(candidates):
        score = cand.count_in(literal, heads)
        lacking = (
            sum(1 for t in controls if t not in cand.added)
            if tokenizers is None
            else len(missing_tokens(tokenizers[cand.name], literal, (hidden or {}).get(cand.name, frozenset())))
        )
        key = (score, -lacking, -order)
        if best is None or key > best:
            best, chosen = key, cand
    assert best is not None
    if best[0] == 0:
        return Choice(chosen.name, 0, "no candidate's special tokens appear in the template; first candidate")
    return Choice(chosen.name, best[0], f"{best[0]} of its added tokens appear in the template")


class Picker:
    """``--tokenizer auto`` in one process: candidates read once, then one choice per template."""

    def __init__(self, models: dict[str, Any]) -> None:
        self.models = models
        self.candidates = [Candidate.of(name, m.tokenizer, m.hidden_specials) for name, m in models.items()]
        self.tokenizers = {name: m.tokenizer for name, m in models.items()}
        self.hidden = {name: m.hidden_specials for name, m in models.items()}

    def choose(self, literal: str) -> Choice:
        return pick(literal, self.candidates, self.tokenizers, self.hidden)
