"""The engine's own prompts as the reference: what a correct loop holds, read from the log, with no render.

When every sampled turn of a record carries ``prompt_ids`` (the ids the engine was given for it), a correct TITO
loop is checked on ids alone: each turn's prompt is the previous prompt plus the previous turn's sampled ids plus
the environment's delta, the trained sequence is the last prompt plus the last sampled ids (an untrained tail
after it changes no gradient), and the loss mask is 1 on exactly the sampled ids. ``exact`` decides that with a
few slice comparisons; ``engine_buffer`` builds the same buffer for the token-level comparison when it fails, and
names every turn whose prompt does not hold the buffer so far (the engine was not given its own samples back).

The template is not consulted: where the loop's contexts differ from the template's own rendering, that is
context drift (``tito_audit.replay.drift``), a separate warning.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from tito_audit.policy.view import mask_runs
from tito_audit.replay.compare import bos_of
from tito_audit.replay.divergence import Divergence, classify, run_text, window
from tito_audit.replay.id_diff import Opcode, align
from tito_audit.replay.schema import Episode


def has_engine_prompts(ep: Episode) -> bool:
    """Every sampled turn carries the engine's prompt (a partial record keeps the template as the reference)."""
    return bool(ep.turns) and all(t.prompt_ids is not None for t in ep.turns)


def sampled_runs(ep: Episode) -> list[tuple[int, int]]:
    """Where a correct loop trains: the runs of sampled ids in the engine's coordinates, adjacent runs merged
    (what ``mask_runs`` of the right loss mask gives)."""
    runs: list[tuple[int, int]] = []
    for t in ep.turns:
        assert t.prompt_ids is not None
        a, b = len(t.prompt_ids), len(t.prompt_ids) + len(t.ids)
        if b == a:
            continue
        if runs and runs[-1][1] == a:
            runs[-1] = (runs[-1][0], b)
        else:
            runs.append((a, b))
    return runs


def exact(ep: Episode, trained_runs: Callable[[Sequence[int]], list[tuple[int, int]]]) -> bool:
    """True when the loop is exact on this episode: every prompt extends the previous prompt + its samples, the
    trained sequence starts with the last prompt + its samples, and the mask is 1 on exactly the sampled ids.
    ``trained_runs``: the runs of 1s of a mask (``policy.view.mask_runs``)."""
    prev_p: list[int] | None = None
    prev_ids: list[int] = []
    for t in ep.turns:
        p = t.prompt_ids
        if p is None:
            return False
        if prev_p is not None:
            n, m = len(prev_p), len(prev_ids)
            if len(p) < n + m or p[:n] != prev_p or p[n : n + m] != prev_ids:
                return False
        prev_p, prev_ids = p, t.ids
    assert prev_p is not None
    got, n, m = ep.input_ids, len(prev_p), len(prev_ids)
    if len(got) < n + m or got[:n] != prev_p or got[n : n + m] != prev_ids:
        return False
    mask = ep.loss_mask
    return mask is not None and len(mask) == len(got) and trained_runs(mask) == sampled_runs(ep)


@dataclass
class EngineBuffer:
    """The buffer a correct loop holds, built from the engine's prompts and the sampled ids."""

    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float | None] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)
    context: list[Divergence] = field(default_factory=list)  # where a prompt does not extend the one before it

    def push(self, ids: Sequence[int], sampled: bool, logprobs: Sequence[float] | None = None) -> None:
        self.ids.extend(ids)
        self.mask.extend([1 if sampled else 0] * len(ids))
        if logprobs is not None and len(logprobs) == len(ids):
            self.logprobs.extend(logprobs)
        else:
            self.logprobs.extend([None] * len(ids))


def engine_buffer(
    ep: Episode,
    *,
    decode: Callable[[Sequence[int]], str] | None,
    stop_ids: Sequence[int],
    special_ids: Sequence[int] = (),
    bos_id: int | None = None,
    bos_ids: Collection[int] = (),
) -> EngineBuffer:
    """The reference buffer: the first prompt, then per turn its sampled ids and the environment's delta taken from
    the next prompt.

    Each prompt is judged against the engine's own previous prompt plus the ids it sampled there, not against the
    buffer so far: a change the loop made to turn k (a sampled turn re-encoded) is reported once, in the prompt
    that first carries it, and the later prompts that carry it forward are judged only on what they add, so each
    turn is judged on its own and a later change is still found. Every departure is a divergence of kind
    ``context`` (the first per turn whose ids it changes, placed in that prompt), and the delta is what follows, in
    the prompt, the end of the previous turn's sampled ids."""
    buf = EngineBuffer()
    bos = {*bos_ids, *(() if bos_id is None else (bos_id,))}
    prev: list[int] = []  # the engine's previous prompt plus the ids it sampled there
    prev_spans: list[tuple[int, int]] = []  # each earlier turn's sampled ids in ``prev``
    for k, t in enumerate(ep.turns):
        p = t.prompt_ids
        assert p is not None
        if k == 0 or p[: len(prev)] == prev:
            delta, spans = p[len(prev) :], prev_spans
        else:
            found, end, spans = _departures(
                prev, prev_spans, p, k, decode=decode, stop_ids=stop_ids, special_ids=special_ids, bos=bos
            )
            buf.context.extend(found)
            delta = p[end:]
        buf.push(delta, False)
        buf.spans.append((len(buf.ids), len(buf.ids) + len(t.ids)))
        buf.push(t.ids, True, t.logprobs)
        prev = [*p, *t.ids]
        prev_spans = [*spans, (len(p), len(prev))]
    return buf


def prompt_departures(
    ep: Episode,
    *,
    decode: Callable[[Sequence[int]], str] | None,
    stop_ids: Sequence[int],
    special_ids: Sequence[int] = (),
    bos_id: int | None = None,
    bos_ids: Collection[int] = (),
) -> list[Divergence]:
    """For a record whose turns carry ``prompt_ids`` only in part (the reference is then the template's buffer or
    the sampled turns): each logged prompt checked against the trained sequence, which in a correct loop starts
    with every prompt the engine was given. A prompt that departs from it is a divergence of kind ``context``: the
    engine sampled that turn in another context than the one it is trained in."""
    got, mask = ep.input_ids, ep.loss_mask
    spans = mask_runs(mask) if mask is not None and len(mask) == len(got) else []
    bos = {*bos_ids, *(() if bos_id is None else (bos_id,))}
    out = []
    for k, t in enumerate(ep.turns):
        p = t.prompt_ids
        if p is None or got[: len(p)] == p:
            continue
        found, _end, _spans = _departures(
            list(got[: len(p)]), spans, p, k, decode=decode, stop_ids=stop_ids, special_ids=special_ids, bos=bos,
            what="the trained sequence", tail_is_delta=False,
        )  # fmt: skip
        # the first departure only: the trained sequence is cut at the prompt's length, so past a departure that
        # changes the length the cut itself would differ
        out.extend(found[:1])
    return out


def _departures(
    ids: Sequence[int],
    spans: Sequence[tuple[int, int]],
    prompt: Sequence[int],
    turn: int,
    *,
    decode: Callable[[Sequence[int]], str] | None,
    stop_ids: Sequence[int],
    special_ids: Sequence[int],
    bos: Collection[int],
    what: str = "its prompt for the turn before and the ids sampled there",
    tail_is_delta: bool = True,
) -> tuple[list[Divergence], int, list[tuple[int, int]]]:
    """Where ``prompt`` departs from ``ids`` (the context it should extend, each earlier turn's sampled ids at
    ``spans``): the first departure per turn whose sampled ids it changes (or that they precede), in turn order;
    where the end of ``ids`` falls in the prompt (the delta starts there: ids the prompt adds right after it are
    the delta, not a change of the turn before; with ``tail_is_delta`` False they are a departure too); and
    ``spans`` carried into the prompt."""
    ops = align(ids, prompt)
    n = len(ids)
    end = min(_end_in(ops, n, ids, prompt, decode), len(prompt))
    ends = [b for _, b in spans]
    first: dict[int, Divergence] = {}
    for tag, i1, i2, j1, j2 in ops:
        if tag == "equal" or (tail_is_delta and i1 >= n):  # ids the prompt adds after ``ids``: the delta
            continue
        if tail_is_delta and i2 == n:  # a change at the end of ``ids``: what follows its end in the prompt is the delta
            j2 = max(j1, min(j2, end))
        owner = next((m for m, b in enumerate(ends) if i1 < b), turn)
        if owner in first:
            continue
        r_ids, g_ids = list(ids[i1:i2]), list(prompt[j1:j2])
        texts = (run_text(decode, ids, i1, i2), run_text(decode, prompt, j1, j2)) if decode else None
        bos_id = bos_of(r_ids, g_ids, None, bos)
        cls = classify(r_ids, g_ids, texts=texts, stop_ids=stop_ids, special_ids=special_ids, bos_id=bos_id)
        _back, exp, act, start = window(ids, prompt, i1, j1)
        sampled = sum(max(0, min(b, i2) - max(a, i1)) for a, b in spans)
        change = f"{texts[0][:40]!r} became {texts[1][:40]!r}" if texts else "other ids"
        message = f"the engine's prompt for turn {turn} does not hold {what} at position {j1}: {change}"
        first[owner] = Divergence(owner, j1, cls, "context", message, i1, exp, act, start, tokens=sampled)
    moved = [(_start_in(ops, a, ids, prompt, decode), _end_in(ops, b, ids, prompt, decode)) for a, b in spans]
    return [first[m] for m in sorted(first)], end, moved


def _start_in(
    ops: Sequence[Opcode], i: int, ids: Sequence[int], prompt: Sequence[int], decode: Callable[..., str] | None
) -> int:
    """Where position ``i`` of the aligned ``ids`` (a run's start) falls in ``prompt``."""
    for tag, i1, i2, j1, _j2 in ops:
        if i1 <= i < i2:
            return j1 + (i - i1) if tag == "equal" else j1
    return _end_in(ops, i, ids, prompt, decode)


def _end_in(
    ops: Sequence[Opcode], e: int, ids: Sequence[int], prompt: Sequence[int], decode: Callable[..., str] | None
) -> int:
    """Where the end ``e`` of a run of the aligned ``ids`` falls in ``prompt``: ids the prompt inserts right after
    it are not the run's. Inside a changed stretch, the run ends where the prompt's text covers its text (a
    re-encoded turn holds the same text in other ids; without a decoder, at the stretch's end)."""
    if e <= 0:
        return 0
    for tag, i1, i2, j1, j2 in ops:
        if i1 < e <= i2:
            if tag == "equal":
                return j1 + (e - i1)
            return j1 + _covering(decode, ids, i1, e, prompt, j1, j2)
    return len(prompt)


def _covering(
    decode: Callable[..., str] | None, ids: Sequence[int], i1: int, e: int, prompt: Sequence[int], j1: int, j2: int
) -> int:
    """The fewest ids of ``prompt[j1:j2]`` whose text is as long as that of ``ids[i1:e]`` (all, when none is)."""
    if decode is None or j2 <= j1:
        return max(0, j2 - j1)
    want = len(run_text(decode, ids, i1, e))
    if len(run_text(decode, prompt, j1, j2)) <= want:
        return j2 - j1
    lo, hi = 0, j2 - j1  # the text of prompt[j1:j1+hi] is longer than ``want``
    while lo < hi:
        mid = (lo + hi) // 2
        if len(run_text(decode, prompt, j1, j1 + mid)) >= want:
            hi = mid
        else:
            lo = mid + 1
    return lo
