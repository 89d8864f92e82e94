"""The run-time guard: is this batch trained on exactly what was sampled, after what the engine was given? Cheap enough
for every batch.

    from tito_audit import check_batch
    check_batch([{"sampled": [turn0_ids, turn1_ids], "input_ids": ids, "loss_mask": mask}, ...])

For each episode, every sampled turn must sit in ``input_ids`` verbatim with the loss mask 1 on exactly its ids (and
0 everywhere else), and where a turn carries ``prompt_ids`` (the context the engine was given for it), the trained
ids before the turn must be exactly those ids (the turn was trained on the context it was sampled on), and the turn
must be trained there, right after them (not a copy of its ids elsewhere). No renders and no tokenizer: slice
comparisons when the batch is right, an alignment only for an episode that is not. Pass ``tokenizer=`` to name
divergences by class (decodes a few ids; its template's stops and next message are read once per tokenizer from a
few bounded probe renders), or ``renderer=`` with ``messages`` in the items to also rebuild the reference buffer
(renders: for debugging, not for every batch). Given ``stop_ids=`` (or a tokenizer: its
chat template's turn end, its eos and the eos ids of the generation config beside it stand for them), ids after a
sampled turn's stop token that are trained fail too: the engine ended the turn at its stop, the loop appended them
(a pad, the template's newline); without either, "ids after the stop not checked" is said.

What it cannot see is said in ``GuardResult.not_checked`` (and in ``summary()``, the ``TitoGuardError`` message, and
once in the log): without ``prompt_ids``, "context not checked" (a context the engine never saw, such as a tool
result dropped between turns, passes); without any loss mask (``loss_mask``, ``mask``, ``labels``,
``response_mask``: see ``tito_audit.trainer.batch_item``), "mask not checked"; without ``stop_ids`` or a tokenizer,
"ids after the stop not checked"; where at least as many turns end without their stop token (followed by it
untrained, or by more ids) as with it, or every turn of a tenth or more of the episodes of three or more turns does,
"stop maybe not trained" (a loop that cuts the stop the engine sampled: a length limit's cuts are few; the ids
cannot tell, so it is no failure). ``ok`` is the guard's claim (every sampled turn trained verbatim, the mask on
exactly its ids): never for a batch from which nothing could be checked (no items, no ``input_ids``), nor for one
whose mask was not checked. ``complete`` adds the context and the stops.

``on_fail``: ``"raise"`` (``TitoGuardError`` with the first divergence; ``ValueError`` for a batch it cannot check,
or an item without a loss mask), ``"log"`` (one warning per failing episode on ``logger``, and each thing not
checked said once), or ``"return"`` (just the ``GuardResult``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from tito_audit.errors import kind_of
from tito_audit.replay.compare import against_sampled
from tito_audit.replay.divergence import Divergence, classify, run_text, window
from tito_audit.replay.environment import (
    StopEndings,
    ids_after_stop,
    stop_endings,
    stops_cut,
    trained_runs,
    untrained_after_stop,
)
from tito_audit.replay.id_diff import align
from tito_audit.replay.next_message import NextMessage, plain_decode
from tito_audit.replay.schema import SampledTurn
from tito_audit.rollout.tokens import find_run
from tito_audit.sources.given import TokenizerParts, tokenizer_parts
from tito_audit.trainer.batch_item import MASK_FIELDS, BatchItem, BatchItemError, native_record, read_item
from tito_audit.trainer.tokenizer_reading import tokenizer_reading

OnFail = Literal["raise", "log", "return"]
_LOG = logging.getLogger("tito_audit.guard")
_SAID: set[tuple[int, str]] = set()  # (logger id, kind of note) already logged in this process
MASK_NOT_CHECKED = "mask not checked"
CONTEXT_NOT_CHECKED = "context not checked"
STOPS_NOT_CHECKED = "ids after the stop not checked"
STOP_NOT_TRAINED = "stop maybe not trained"


@dataclass
class GuardFailure:
    episode: int  # index in the batch
    divergence: Divergence
    trained_not_sampled: int
    sampled_not_trained: int
    mask_flips: int
    context_mismatches: int = 0  # turns trained after other ids than the engine was given (their prompt_ids)

    def __str__(self) -> str:
        d = self.divergence
        where = f"token {d.index}" if d.index is not None else "shape"
        context = f", context differs on {self.context_mismatches} turn(s)" if self.context_mismatches else ""
        return (
            f"episode {self.episode}, turn {d.turn}, {where} ({d.cls}): {d.message}; trained never sampled "
            f"{self.trained_not_sampled}, sampled not trained {self.sampled_not_trained}, mask flips "
            f"{self.mask_flips}{context}"
        )


@dataclass
class GuardResult:
    episodes: int = 0  # episodes checked
    failures: list[GuardFailure] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)  # what could not be compared, e.g. "mask not checked: ..."
    errors: list[str] = field(default_factory=list)  # why items (or the whole batch) could not be checked at all
    unmasked: int = 0  # episodes without a loss mask: their sampled ids were found, what is trained was not checked

    @property
    def ok(self) -> bool:
        """Something was checked, nothing diverged, and every episode's mask was compared (the guard's claim: trained
        on exactly what was sampled). Context without ``prompt_ids`` is not part of it: see ``complete``."""
        return self.episodes > 0 and not self.failures and not self.errors and not self.unmasked

    @property
    def complete(self) -> bool:
        """Ok, and the context of every turn and what follows its stop were compared too: nothing in
        ``not_checked``."""
        return self.ok and not self.not_checked

    def __bool__(self) -> bool:
        return self.ok

    @property
    def first(self) -> GuardFailure | None:
        return self.failures[0] if self.failures else None

    def summary(self) -> str:
        """One line: what was found, and what was not checked."""
        if self.errors:
            head = f"nothing checked on {len(self.errors)} item(s): {self.errors[0]}"
        elif not self.episodes:
            head = "nothing checked: the batch has no episodes"
        elif self.failures:
            head = f"{len(self.failures)} of {self.episodes} episode(s) diverge; first: {self.first}"
        elif self.unmasked:
            head = f"no divergence in the ids of {self.episodes} episode(s), not ok: the mask was not checked"
        else:
            head = f"ok: {self.episodes} episode(s)"
        return "; ".join([head, *self.not_checked])


class TitoGuardError(AssertionError):
    """A batch trains on tokens that were not sampled (or drops sampled ones); ``result`` has every failure."""

    def __init__(self, result: GuardResult) -> None:
        super().__init__(f"TITO guard: {result.summary()}")
        self.result = result


def _item(item: Any) -> BatchItem:
    """A mapping (any names ``batch_item`` reads), a Trajectory, or a replay Episode, read as a ``BatchItem``."""
    if hasattr(item, "sampled_spans") and hasattr(item, "loss_mask"):  # tito_audit.Trajectory
        ids = list(item.input_ids)
        turns = [SampledTurn(ids[a:b]) for a, b in item.sampled_spans()]
        return BatchItem(turns, ids, list(item.loss_mask), "loss_mask")
    if hasattr(item, "turns") and hasattr(item, "input_ids") and not isinstance(item, Mapping):  # Episode
        mask = item.loss_mask
        return BatchItem(list(item.turns), item.input_ids, mask, "loss_mask" if mask is not None else None)
    return read_item(item)


def _rows(batch: Any) -> list[Any]:
    """A list of items, or one mapping of columns (``{"sampled": [...], "input_ids": [...], ...}``)."""
    if isinstance(batch, Mapping):
        cols = {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in batch.items()}
        if cols.get("input_ids") is None:
            raise BatchItemError(
                f"a batch of columns needs an 'input_ids' column (the ids the trainer trains on); it has "
                f"{', '.join(map(repr, cols)) or 'none'}"
            )
        n = len(cols["input_ids"])
        short = [k for k, v in cols.items() if isinstance(v, list) and len(v) != n]
        if short:
            names = ", ".join(map(repr, short))
            raise BatchItemError(f"columns {names} do not have one entry per row of input_ids ({n})")
        return [{k: (v[i] if isinstance(v, list) else v) for k, v in cols.items()} for i in range(n)]
    if isinstance(batch, str | bytes) or not isinstance(batch, Iterable):
        raise BatchItemError(f"a batch is a list of items or a mapping of columns, not {kind_of(batch)}")
    return list(batch)


def _context_divergence(
    k: int,
    turn: SampledTurn,
    ids: list[int],
    decode: Callable[[Sequence[int]], str] | None,
    stop_ids: Sequence[int],
    special_ids: Sequence[int],
    bos_id: int | None,
) -> Divergence | None:
    """Turn ``k`` must follow exactly the context the engine was given: ``ids`` starts with its ``prompt_ids``,
    then its sampled ids. One slice comparison when it does; an alignment of the two contexts when it does not."""
    prompt = turn.prompt_ids or []
    n = len(prompt)
    if ids[:n] == prompt and ids[n : n + len(turn.ids)] == turn.ids:
        return None
    ref = prompt + turn.ids
    # where the turn was trained (if anywhere): the trained context is everything before it
    at = find_run(ids, turn.ids, 0)
    got = ids[: at + len(turn.ids)] if at is not None else ids[: len(ref)]
    for tag, i1, i2, j1, j2 in align(ref, got):
        if tag == "equal":
            continue
        r_ids, g_ids = ref[i1:i2], got[j1:j2]
        texts = (run_text(decode, ref, i1, i2), run_text(decode, got, j1, j2)) if decode else None
        cls = classify(r_ids, g_ids, texts=texts, stop_ids=stop_ids, special_ids=special_ids, bos_id=bos_id)

        def show(seq: Sequence[int], a: int, b: int) -> str:
            b = min(b, a + 24)
            return repr(run_text(decode, seq, a, b)) if decode else str(list(seq[a:b]))

        if i1 >= len(prompt):
            what = "the trained sequence does not continue the engine's context with the sampled ids"
        elif not g_ids:
            what = f"the trained context lacks {show(ref, i1, i2)}, which the engine was given"
        elif not r_ids:
            what = f"the trained context has {show(got, j1, j2)}, which the engine was not given"
        else:
            same = " (same text, other ids)" if texts is not None and texts[0] == texts[1] else ""
            what = f"the trained context has {show(got, j1, j2)} where the engine was given {show(ref, i1, i2)}{same}"
        _back, exp, act, start = window(ref, got, i1, j1)
        message = f"turn {k} was sampled on another context: {what} (prompt_ids)"
        return Divergence(k, j1, cls, "ids", message, i1, exp, act, start)
    at = next((i for i, (a, b) in enumerate(zip(ref, ids, strict=False)) if a != b), min(len(ref), len(ids)))
    return Divergence(k, at, "template", "ids", f"turn {k} was sampled on another context (prompt_ids)", at)


def _untrained_where_sampled(
    k: int, turn: SampledTurn, mask: Sequence[int], decode: Callable[[Sequence[int]], str] | None
) -> Divergence | None:
    """Turn ``k``, whose context matched, was sampled right after its ``prompt_ids``: it must be trained there.
    The same ids trained elsewhere (a mask placed on the first copy of the response, in a user message that quotes
    it) pass the comparison of trained runs with sampled turns, which does not know where a turn was sampled."""
    n = len(turn.prompt_ids or [])
    span = mask[n : n + len(turn.ids)]
    off = next((j for j, m in enumerate(span) if not m), None)
    if off is None:
        return None
    at = n + off
    tok = decode([turn.ids[off]]) if decode else str(turn.ids[off])
    message = (
        f"turn {k} was sampled at token {n} (after its prompt_ids) and is not trained there: {tok!r} at token {at} "
        "has loss_mask 0"
    )
    return Divergence(k, at, "template", "mask", message, at, tokens=sum(1 for m in span if not m))


def _mask_missing() -> BatchItemError:
    return BatchItemError(
        f"no loss mask ({', '.join(MASK_FIELDS)}): which tokens are trained cannot be checked; pass one, or check "
        f"with on_fail='log' or 'return', which compare the ids alone and say '{MASK_NOT_CHECKED}'"
    )


@dataclass
class _Decoding:
    """What naming a divergence needs from the tokenizer (nothing without one: the ids alone are compared)."""

    decode: Callable[[Sequence[int]], str] | None = None
    stop_ids: Sequence[int] = ()
    specials: list[int] = field(default_factory=list)
    bos: int | None = None
    next_message: NextMessage | None = None  # how the template's next message shows after a turn (a tokenizer's)

    @classmethod
    def of(cls, given: TokenizerParts, stop_ids: Sequence[int]) -> _Decoding:
        """What ``check_batch`` reads from its ``tokenizer=`` (``sources.given.tokenizer_parts``: a tokenizer, or a
        ``LoadedModel``'s with its template and generation eos ids) and its ``stop_ids=``."""
        tokenizer = given.tokenizer
        if tokenizer is None:
            return cls(stop_ids=stop_ids)
        stops, following = tokenizer_reading(tokenizer, given.chat_template, given.generation_eos_ids)
        decode = plain_decode(tokenizer)
        return cls(
            decode,
            stop_ids or stops,
            list(getattr(tokenizer, "all_special_ids", []) or []),
            getattr(tokenizer, "bos_token_id", None),
            replace(following, decode=decode) if following is not None else None,
        )


@dataclass
class _Counts:
    """What the items checked left unchecked: episodes without a mask, turns without ``prompt_ids``."""

    unmasked: int = 0
    turns: int = 0
    turns_without_context: int = 0
    no_stops: bool = False  # no stop ids known (neither stop_ids nor a tokenizer): ids after a stop not looked for
    endings: StopEndings = field(default_factory=StopEndings)  # how the turns end (the stop cut from them?)


def _check_rows(rows: list[Any], result: GuardResult, on_fail: OnFail, renderer: Any, dec: _Decoding) -> _Counts:
    """Check every item into ``result``; an item that cannot be read raises (``on_fail="raise"``) or is named."""
    counts = _Counts(no_stops=not dec.stop_ids)
    for n, raw in enumerate(rows):
        if renderer is not None and isinstance(raw, Mapping) and raw.get("messages") is not None:
            result.episodes += 1
            counts.unmasked += not any(raw.get(k) is not None for k in MASK_FIELDS)
            failure = _with_renders(n, raw, renderer)
            if failure is not None:
                result.failures.append(failure)
            continue
        try:
            item = _item(raw)
            if item.loss_mask is None and item.mask_source is None and on_fail == "raise":
                raise _mask_missing()
        except BatchItemError as exc:
            if on_fail == "raise":
                raise BatchItemError(f"check_batch: item {n}: {exc}") from None
            result.errors.append(f"item {n}: {exc}")
            continue
        result.episodes += 1
        failure = _check_item(n, item, dec.decode, dec.stop_ids, dec.specials, dec.bos)
        if failure is not None:
            result.failures.append(failure)
        if item.loss_mask is None and item.mask_source is None:
            counts.unmasked += 1
        counts.turns += len(item.turns)
        if dec.stop_ids:
            counts.endings += stop_endings(
                item.turns, item.input_ids, item.loss_mask, frozenset(dec.stop_ids), dec.next_message
            )
        counts.turns_without_context += sum(t.prompt_ids is None for t in item.turns)
    return counts


def _say_unchecked(result: GuardResult, counts: _Counts) -> None:
    """``not_checked``: the mask of unmasked episodes, ids after the stop without stop ids, a stop that looks cut
    from the turns, the context of turns without ``prompt_ids``."""
    result.unmasked = counts.unmasked
    if counts.unmasked:
        result.not_checked.append(
            f"{MASK_NOT_CHECKED} on {counts.unmasked} of {result.episodes} episode(s): no {', '.join(MASK_FIELDS)} "
            "(the sampled ids were found in input_ids; which tokens are trained was not compared)"
        )
    if counts.no_stops and counts.turns:
        result.not_checked.append(
            f"{STOPS_NOT_CHECKED} on {counts.turns} turn(s): no stop_ids or tokenizer (ids a loop glued after a "
            "turn's stop token, trained as sampled, pass)"
        )
    if not counts.no_stops and stops_cut(counts.endings, result.episodes):
        e = counts.endings
        result.not_checked.append(
            f"{STOP_NOT_TRAINED} on {e.untrained + e.missing} of {counts.turns} turn(s): they end without the stop "
            f"token ({e.untrained} followed by it untrained, {e.missing} by more ids), {e.stopped} with it, "
            f"{e.cut_episodes} of {e.long_episodes} episode(s) of three or more turns without it in any: if the "
            "engine sampled it, the loop cuts it and the policy is never trained to end a turn (a length limit's cut "
            "would be a few, rarely every turn of an episode)"
        )
    if counts.turns_without_context:
        result.not_checked.append(
            f"{CONTEXT_NOT_CHECKED} on {counts.turns_without_context} of {counts.turns} turn(s): no prompt_ids (a "
            "context the engine never saw, such as a tool result dropped between turns, passes)"
        )


def _log(result: GuardResult, logger: logging.Logger | None) -> None:
    """``on_fail="log"``: one warning per failure and per error, each thing not checked once per process."""
    log = logger or _LOG
    for f in result.failures:
        log.warning("TITO guard: %s", f)
    for e in result.errors:
        log.warning("TITO guard: nothing checked: %s", e)
    for note in result.not_checked:
        kind = note.split(" on ", 1)[0]
        if (id(log), kind) not in _SAID:  # once per process: it holds for every batch of the run
            _SAID.add((id(log), kind))
            log.warning("TITO guard: %s", note)


def check_batch(
    batch: Any,
    *,
    on_fail: OnFail = "raise",
    tokenizer: Any = None,
    stop_ids: Sequence[int] = (),
    logger: logging.Logger | None = None,
    renderer: Any = None,
) -> GuardResult:
    """Check one training batch; see the module docstring. Returns the ``GuardResult`` unless it raises."""
    if on_fail not in ("raise", "log", "return"):
        raise ValueError(f"on_fail must be 'raise', 'log' or 'return', not {on_fail!r}")
    dec = _Decoding.of(tokenizer_parts(tokenizer, "check_batch"), stop_ids)
    result = GuardResult()
    try:
        rows = _rows(batch)
    except BatchItemError as exc:
        rows = []
        result.errors.append(str(exc))
    _say_unchecked(result, _check_rows(rows, result, on_fail, renderer, dec))
    if not rows and not result.errors:
        result.errors.append("the batch has no episodes")
    if result.errors and on_fail == "raise":
        raise BatchItemError(f"check_batch: nothing checked: {result.errors[0]}")
    if result.failures and on_fail == "raise":
        raise TitoGuardError(result)
    if on_fail == "log":
        _log(result, logger)
    return result


def _check_item(
    n: int,
    item: BatchItem,
    decode: Callable[[Sequence[int]], str] | None,
    stop_ids: Sequence[int],
    specials: Sequence[int],
    bos: int | None,
) -> GuardFailure | None:
    if item.problems:
        at, message = item.problems[0]
        d = Divergence(-1, at, "template", "shape" if at is None else "mask", message)
        return GuardFailure(n, d, 0, 0, 0)
    ids, mask = item.input_ids, item.loss_mask
    # ids after a turn's stop logged with it and trained nowhere were never sampled: not read as samples dropped
    turns, _cut = untrained_after_stop(item.turns, ids, mask, frozenset(stop_ids), frozenset(specials))
    lps = [t.logprobs for t in turns]
    cmp = against_sampled(
        [t.ids for t in turns], lps, ids, mask, decode=decode, stop_ids=stop_ids, special_ids=specials, bos_id=bos
    )
    context: list[Divergence] = []
    misplaced: list[Divergence] = []  # a turn whose context matched, not trained where it was sampled
    for k, t in enumerate(turns):
        if t.prompt_ids is not None:
            moved = _context_divergence(k, t, ids, decode, stop_ids, specials, bos)
            if moved is not None:
                context.append(moved)
            elif mask is not None and (off := _untrained_where_sampled(k, t, mask, decode)) is not None:
                misplaced.append(off)
    # ids after a turn's stop token, trained: the engine stopped there (given the stop ids, or a tokenizer's)
    glued = trained_runs(turns, ids, mask, ids_after_stop(turns, frozenset(stop_ids)), decode or _ids_text)
    if cmp.ok and not context and not glued and not misplaced:
        return None
    # the earliest in the trained sequence; at a tie, the sampled one's
    found = [*cmp.divergences[:1], *context, *misplaced, *glued[:1]]
    first = min(found, key=lambda div: div.index if div.index is not None else -1)
    # where the comparison of runs found each turn trained (elsewhere), its ids in place were not counted
    elsewhere = sum(d.tokens for d in misplaced) if cmp.ok else 0
    trained_not_sampled = cmp.trained_not_sampled + sum(g.tokens for g in glued) + elsewhere
    sampled_not_trained = cmp.sampled_not_trained + elsewhere
    return GuardFailure(n, first, trained_not_sampled, sampled_not_trained, cmp.mask_flips, len(context))


def _ids_text(ids: Sequence[int]) -> str:
    """Ids as text without a tokenizer: the ids themselves."""
    return str(list(ids))


def _with_renders(n: int, item: Mapping[str, Any], renderer: Any) -> GuardFailure | None:
    """Full replay of one item against the rebuilt buffer (renders; asked for with ``renderer=``)."""
    from tito_audit.replay.analyze import analyze
    from tito_audit.replay.context import ReplayContext
    from tito_audit.replay.schema import episode_from_native
    from tito_audit.rollout.stop import stop_token_ids

    native = dict(native_record(item))
    ep = episode_from_native(native, n)
    tok = renderer.tokenizer
    ctx = ReplayContext(
        renderer, list(stop_token_ids(tok, renderer)), list(tok.all_special_ids or []), tok.bos_token_id, False
    )
    res = analyze(ep, ctx)
    if not res.divergences and not res.shape:
        return None
    d = res.divergences[0] if res.divergences else Divergence(-1, None, "template", "shape", "; ".join(res.shape))
    return GuardFailure(n, d, res.trained_not_sampled, res.sampled_not_trained, res.mask_flips)
