"""roundtrip: decode -> re-encode of sampled tokens, canonical and non-canonical, as a rate."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tito_audit.checks.base import check
from tito_audit.context import AuditContext
from tito_audit.findings import Collector, Outcome
from tito_audit.rendering.bounded_cache import BoundedCache
from tito_audit.rendering.renderer import tokenizer_cache


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
    tok = ctx.tokenizer
    exact = _roundtrip(ctx, ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    default = (
        _roundtrip(ctx, ids, skip_special_tokens=False) if getattr(tok, "clean_up_tokenization_spaces", False) else None
    )
    skip_ok = _roundtrip(ctx, ids, skip_special_tokens=True, clean_up_tokenization_spaces=False) == ids
    o = _TurnOutcome(exact, default, skip_ok)
    positions: list[tuple[int, list[int]]] = []
    for pos, tid in enumerate(ids[:-1]):
        if tid not in splits:
            splits[tid] = noncanonical_split(tok, tid, ctx.vocab, ctx.special_ids)
        split = splits[tid]
        if split is not None:
            positions.append((pos, split))
    o.split_possible = len(positions)
    cache = tokenizer_cache(tok)
    for at in range(0, len(positions), 128):  # variants decoded in batches (a long turn has hundreds)
        chunk = [([*ids[:pos], *split, *ids[pos + 1 :]], split) for pos, split in positions[at : at + 128]]
        texts = cache.decode_many([v for v, _ in chunk], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        for (variant, split), text in zip(chunk, texts, strict=True):
            back = ctx.renderer.encode(text)
            if back != variant:
                o.split_lost += 1
                if o.first_lost is None:
                    o.first_lost = (variant, back, split)
    partial = [p for p, text in enumerate(ctx.renderer.token_texts(ids[:-1]), start=1) if "\ufffd" in text]
    for pos in partial[:1]:
        if "\ufffd" in ctx.renderer.decode(ids[:pos]) and "\ufffd" not in ctx.renderer.decode(ids):
            cut = ids[:pos]
            same = _roundtrip(ctx, cut, skip_special_tokens=False, clean_up_tokenization_spaces=False) == cut
            o.cut = (cut, None if same else _roundtrip(ctx, cut))
        break
    return o


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
    tok = ctx.tokenizer
    found = Collector(ctx, "roundtrip")
    turns = [(s, t) for s in ctx.ok_simulations(exclude_tags=("special_text",)) for t in s.turns]
    if not turns:
        return Outcome(not_applicable="no assistant turn could be simulated")
    canonical_bad = cleanup_bad = skip_bad = 0
    split_possible = split_lost = tokens = 0
    cut_bad = cut_total = 0
    outcomes = _outcome_memo(ctx)  # many scenarios (and a scan's templates) sample the same turn
    splits = _split_memo(ctx)
    for sim, turn in turns:
        ids = turn.sampled_ids
        key = tuple(ids)
        o = outcomes.get(key)
        if o is None:
            o = outcomes.put(key, _turn_outcome(ctx, ids, splits), len(ids))
        tokens += len(ids)
        if o.exact != ids:
            canonical_bad += 1
            if canonical_bad <= 3:
                found.compare(
                    sim.scenario.id,
                    ids,
                    o.exact,
                    f"canonical ids of message {turn.index} do not survive decode→encode",
                    trainable=[1] * len(ids),
                )
        if o.default is not None and o.default != ids:
            cleanup_bad += 1
            if cleanup_bad == 1:
                found.compare(
                    sim.scenario.id,
                    ids,
                    o.default,
                    "clean_up_tokenization_spaces=True (this tokenizer's default) rewrites decoded text",
                    cls="whitespace",
                    trainable=[1] * len(ids),
                )
        if not o.skip_ok:
            skip_bad += 1
        split_possible += o.split_possible
        if o.first_lost is not None:
            if split_lost == 0:
                variant, back, split = o.first_lost
                found.compare(
                    sim.scenario.id,
                    variant,
                    back,
                    f"a non-canonical split a sampler can emit ({tok.convert_ids_to_tokens(split[0])!r}"
                    f" + {tok.convert_ids_to_tokens(split[1])!r}) re-encodes as one token",
                    cls="non_canonical",
                    trainable=[1] * len(variant),
                )
            split_lost += o.split_lost
        if o.cut is not None:
            cut_total += 1
            cut, cut_back = o.cut
            if cut_back is not None:
                cut_bad += 1
                if cut_bad == 1:
                    found.compare(
                        sim.scenario.id,
                        cut,
                        cut_back,
                        "a completion cut at a length limit inside a multi-byte character decodes"
                        " to U+FFFD and re-encodes differently",
                        cls="non_canonical",
                    )
    n = len(turns)
    rates = {
        "canonical_failure_rate": canonical_bad / n,
        "cleanup_failure_rate": cleanup_bad / n,
        "skip_special_tokens_failure_rate": skip_bad / n,
        "noncanonical_split_rate": split_possible / max(tokens, 1),
        "noncanonical_lost_rate": split_lost / max(split_possible, 1),
        "multibyte_cut_failure_rate": cut_bad / max(cut_total, 1),
    }
    findings = found.findings
    for f in findings:
        f.rate = {
            "non_canonical": rates["noncanonical_lost_rate"],
            "whitespace": rates["cleanup_failure_rate"],
        }.get(f.cls, rates["canonical_failure_rate"])
    summary = (
        f"canonical {1 - rates['canonical_failure_rate']:.0%} exact; "
        f"{rates['noncanonical_split_rate']:.0%} of sampled tokens have a non-canonical split, "
        f"{rates['noncanonical_lost_rate']:.0%} of those are lost; "
        f"skip_special_tokens breaks {rates['skip_special_tokens_failure_rate']:.0%} of turns"
    )
    return Outcome(findings, summary, data=rates, comparisons=n)
