"""roundtrip: decode -> re-encode of sampled tokens, canonical and non-canonical, as a rate.

It measures canonical ids, decoding with ``clean_up_tokenization_spaces`` and ``skip_special_tokens``,
non-canonical splits a sampler can emit (two in-vocabulary tokens whose concatenation is one token), and
completions cut inside a multi-byte character; the rates are in the check's ``data`` and in each finding's
``rate``. Re-encoding changes the tokens most often exactly on the low-probability tokens a sampler picked.

**Example** (``Qwen/Qwen2.5-7B-Instruct``, ``single_call/plain``, class ``non_canonical``, first divergent token
2): ``a non-canonical split a sampler can emit ('{' + '"') re-encodes as one token``.

    sampled      ... | 90 '{' 1 '"' 606 'name'
    re-encoded   ... | 4913 '{"' 606 'name' 788 '":'

``microsoft/Phi-3-mini-4k-instruct`` (class ``whitespace``): even canonical ids fail — ``{"`` is id 6377 inside
the completion but re-encodes as 8853 (SentencePiece's word-initial form), so only 7% of turns round-trip.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tito_audit.audit.checks.base import check
from tito_audit.audit.collector import Collector
from tito_audit.audit.context import AuditContext
from tito_audit.rendering.bounded_cache import BoundedCache
from tito_audit.rendering.tokenizer_cache import tokenizer_cache
from tito_audit.report.findings import Outcome


def noncanonical_split(tokenizer: Any, token_id: int, vocab: Mapping[str, int], specials: set[int]) -> list[int] | None:
    """Two in-vocabulary tokens whose concatenation is ``token_id``'s piece (what a sampler can emit)."""
    piece = tokenizer.convert_ids_to_tokens(token_id)
    if not isinstance(piece, str) or len(piece) < 2 or token_id in specials:
        return None
    for cut in range(1, len(piece)):
        left, right = vocab.get(piece[:cut]), vocab.get(piece[cut:])
        if left is not None and right is not None:
            return [left, right]
    return None


def _roundtrip(ctx: AuditContext, ids: Sequence[int], **decode_kwargs: Any) -> list[int]:
    return ctx.renderer.encode(ctx.renderer.decode(ids, **decode_kwargs))


@dataclass
class _TurnOutcome:
    """What decode→encode does to one turn's sampled ids (a pure function of the ids, so computed once)."""

    exact: list[int]
    default: list[int] | None  # with the tokenizer's default cleanup, when it cleans up
    skip_ok: bool
    split_possible: int = 0
    split_lost: int = 0
    first_lost: tuple[list[int], list[int], list[int]] | None = None  # variant, its round trip, the split
    cut: tuple[list[int], list[int] | None] | None = None  # ids cut inside a character, round trip if it differs


def _split_memo(ctx: AuditContext) -> dict[int, list[int] | None]:
    """``noncanonical_split`` per token id, shared by every audit on this tokenizer (a scan's templates)."""
    key = ("noncanonical_split", frozenset(ctx.special_ids))
    memo: dict[int, list[int] | None] = tokenizer_cache(ctx.tokenizer).memo.setdefault(key, {})
    return memo


def _outcome_memo(ctx: AuditContext) -> BoundedCache:
    """Turn outcomes per tokenizer: an outcome depends on the ids and the tokenizer only, not on the template."""
    key = ("roundtrip_outcomes", frozenset(ctx.special_ids))
    memo: BoundedCache = tokenizer_cache(ctx.tokenizer).memo.setdefault(key, BoundedCache(2048, 1_000_000))
    return memo


def _turn_outcome(ctx: AuditContext, ids: list[int], splits: dict[int, list[int] | None]) -> _TurnOutcome:
    tokenizer = ctx.tokenizer
    exact = _roundtrip(ctx, ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    default = (
        _roundtrip(ctx, ids, skip_special_tokens=False)
        if getattr(tokenizer, "clean_up_tokenization_spaces", False)
        else None
    )
    skip_ok = _roundtrip(ctx, ids, skip_special_tokens=True, clean_up_tokenization_spaces=False) == ids
    outcome = _TurnOutcome(exact, default, skip_ok)
    positions: list[tuple[int, list[int]]] = []
    for pos, tid in enumerate(ids[:-1]):
        if tid not in splits:
            splits[tid] = noncanonical_split(tokenizer, tid, ctx.vocab, ctx.special_ids)
        split = splits[tid]
        if split is not None:
            positions.append((pos, split))
    outcome.split_possible = len(positions)
    cache = tokenizer_cache(tokenizer)
    for at in range(0, len(positions), 128):  # variants decoded in batches (a long turn has hundreds)
        chunk = [([*ids[:pos], *split, *ids[pos + 1 :]], split) for pos, split in positions[at : at + 128]]
        texts = cache.decode_many([v for v, _ in chunk], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        for (variant, split), text in zip(chunk, texts, strict=True):
            back = ctx.renderer.encode(text)
            if back != variant:
                outcome.split_lost += 1
                if outcome.first_lost is None:
                    outcome.first_lost = (variant, back, split)
    partial = [p for p, text in enumerate(ctx.renderer.token_texts(ids[:-1]), start=1) if "\ufffd" in text]
    for pos in partial[:1]:
        if "\ufffd" in ctx.renderer.decode(ids[:pos]) and "\ufffd" not in ctx.renderer.decode(ids):
            cut = ids[:pos]
            same = _roundtrip(ctx, cut, skip_special_tokens=False, clean_up_tokenization_spaces=False) == cut
            outcome.cut = (cut, None if same else _roundtrip(ctx, cut))
        break
    return outcome


class _Tally:
    """One way a turn can break: how often it did, with a finding for the first ``findings`` times."""

    def __init__(self, found: Collector, findings: int = 1) -> None:
        self.found = found
        self.findings = findings
        self.count = 0

    def add(
        self,
        scenario: str,
        expected: list[int],
        actual: list[int],
        message: str,
        cls: str | None = None,
        trainable: list[int] | None = None,
        count: int = 1,
    ) -> None:
        if self.count < self.findings:
            self.found.compare(scenario, expected, actual, message, cls=cls, trainable=trainable)
        self.count += count


@check(
    id="roundtrip",
    title="Decode → re-encode round trip",
    severity="warning",
    order=90,
    merge_dependent="its rates and findings are the base tokenizer's merges (status agreed only because every real "
    "tokenizer has non-canonical splits; the rates differed)",
    explanation="""
Tokenization is not injective: a sampler can emit `"\\n"+"\\n"` where the tokenizer writes `"\\n\\n"`, and
decoding options rewrite text (`clean_up_tokenization_spaces`, `skip_special_tokens`), and a completion cut at
a length limit can end inside a multi-byte character. Any code path that decodes sampled ids and encodes the
text again (message lists, string-based rollouts) changes the tokens the gradient is computed on.""",
    fix_hint="""
Never decode→re-encode sampled ids for training; keep the engine's ids. Decode only for parsing and display.""",
)
def roundtrip(ctx: AuditContext) -> Outcome:
    tokenizer = ctx.tokenizer
    found = Collector(ctx, "roundtrip")
    turns = [(s, t) for s in ctx.ok_simulations(exclude_tags=("special_text",)) for t in s.turns]
    if not turns:
        return Outcome(not_applicable="no assistant turn could be simulated")
    canonical = _Tally(found, findings=3)
    cleanup = _Tally(found)
    lost = _Tally(found)  # counts lost splits, not turns
    cut = _Tally(found)
    skip_bad = split_possible = tokens = cut_total = 0
    outcomes = _outcome_memo(ctx)  # many scenarios (and a scan's templates) sample the same turn
    splits = _split_memo(ctx)
    for sim, turn in turns:
        ids = turn.sampled_ids
        key = tuple(ids)
        outcome = outcomes.get(key)
        if outcome is None:
            outcome = outcomes.put(key, _turn_outcome(ctx, ids, splits), len(ids))
        scenario = sim.scenario.id
        tokens += len(ids)
        if outcome.exact != ids:
            canonical.add(
                scenario,
                ids,
                outcome.exact,
                f"canonical ids of message {turn.index} do not survive decode→encode",
                trainable=[1] * len(ids),
            )
        if outcome.default is not None and outcome.default != ids:
            cleanup.add(
                scenario,
                ids,
                outcome.default,
                "clean_up_tokenization_spaces=True (this tokenizer's default) rewrites decoded text",
                cls="whitespace",
                trainable=[1] * len(ids),
            )
        if not outcome.skip_ok:
            skip_bad += 1
        split_possible += outcome.split_possible
        if outcome.first_lost is not None:
            variant, back, split = outcome.first_lost
            lost.add(
                scenario,
                variant,
                back,
                f"a non-canonical split a sampler can emit ({tokenizer.convert_ids_to_tokens(split[0])!r}"
                f" + {tokenizer.convert_ids_to_tokens(split[1])!r}) re-encodes as one token",
                cls="non_canonical",
                trainable=[1] * len(variant),
                count=outcome.split_lost,
            )
        if outcome.cut is not None:
            cut_total += 1
            cut_ids, cut_back = outcome.cut
            if cut_back is not None:
                cut.add(
                    scenario,
                    cut_ids,
                    cut_back,
                    "a completion cut at a length limit inside a multi-byte character decodes"
                    " to U+FFFD and re-encodes differently",
                    cls="non_canonical",
                )
    n = len(turns)
    rates = {
        "canonical_failure_rate": canonical.count / n,
        "cleanup_failure_rate": cleanup.count / n,
        "skip_special_tokens_failure_rate": skip_bad / n,
        "noncanonical_split_rate": split_possible / max(tokens, 1),
        "noncanonical_lost_rate": lost.count / max(split_possible, 1),
        "multibyte_cut_failure_rate": cut.count / max(cut_total, 1),
    }
    findings = found.findings
    for finding in findings:
        finding.rate = {
            "non_canonical": rates["noncanonical_lost_rate"],
            "whitespace": rates["cleanup_failure_rate"],
        }.get(finding.cls, rates["canonical_failure_rate"])
    summary = (
        f"canonical {1 - rates['canonical_failure_rate']:.0%} exact; "
        f"{rates['noncanonical_split_rate']:.0%} of sampled tokens have a non-canonical split, "
        f"{rates['noncanonical_lost_rate']:.0%} of those are lost; "
        f"skip_special_tokens breaks {rates['skip_special_tokens_failure_rate']:.0%} of turns"
    )
    return Outcome(findings, summary, data=rates, comparisons=n)
