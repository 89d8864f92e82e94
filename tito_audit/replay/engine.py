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

from tito_audit.replay.compare import bos_of, mask_runs
from tito_audit.replay.divergence import Divergence, classify, run_text, window
from tito_audit.replay.id_diff import align
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
    ``trained_runs``: the runs of 1s of a mask (``compare.mask_runs``)."""
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
    context: list[Divergence] = field(default_factory=list)  # turns whose prompt does not hold the buffer so far

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
    the next prompt. A prompt that does not start with the buffer so far is a divergence of the engine's context
    (kind ``context``, placed in that prompt), and its delta is what follows the buffer's end in it."""
    buf = EngineBuffer()
    for k, t in enumerate(ep.turns):
        p = t.prompt_ids
        assert p is not None
        if k == 0:
            buf.push(p, False)
        elif p[: len(buf.ids)] == buf.ids:
            buf.push(p[len(buf.ids) :], False)
        else:
            bos = {*bos_ids, *(() if bos_id is None else (bos_id,))}
            div, end = _context_divergence(
                buf.ids, buf.mask, buf.spans, p, k, decode=decode, stop_ids=stop_ids, special_ids=special_ids, bos=bos
            )
            buf.context.append(div)
            buf.push(p[end:], False)
        buf.spans.append((len(buf.ids), len(buf.ids) + len(t.ids)))
        buf.push(t.ids, True, t.logprobs)
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
        head = list(got[: len(p)])
        head_mask = list(mask[: len(p)]) if mask is not None and len(mask) == len(got) else [0] * len(head)
        div, _end = _context_divergence(
            head, head_mask, spans, p, k, decode=decode, stop_ids=stop_ids, special_ids=special_ids, bos=bos,
            what="the trained sequence",
        )  # fmt: skip
        out.append(div)
    return out


def _context_divergence(
    ids: Sequence[int],
    mask: Sequence[int],
    spans: Sequence[tuple[int, int]],
    prompt: Sequence[int],
    turn: int,
    *,
    decode: Callable[[Sequence[int]], str] | None,
    stop_ids: Sequence[int],
    special_ids: Sequence[int],
    bos: Collection[int],
    what: str = "the buffer",
) -> tuple[Divergence, int]:
    """Where ``prompt`` first departs from ``ids`` (the buffer so far, with its ``mask`` and sampled ``spans``), and
    where the end of ``ids`` falls in it (the delta starts there). The divergence belongs to the turn whose sampled
    ids were changed (or the prompt's own turn)."""
    ops = align(ids, prompt)
    first = next(op for op in ops if op[0] != "equal")
    _tag, i1, i2, j1, j2 = first
    end = len(prompt)
    for op in ops:  # the last position of the prompt that the buffer's ids reach
        if op[1] <= len(ids) <= op[2]:
            end = op[3] + (len(ids) - op[1]) if op[0] == "equal" else op[4]
    owner = next((n for n, (_, b) in enumerate(spans) if i1 < b), turn)
    r_ids, g_ids = list(ids[i1:i2]), list(prompt[j1:j2])
    texts = (run_text(decode, ids, i1, i2), run_text(decode, prompt, j1, j2)) if decode else None
    bos_id = bos_of(r_ids, g_ids, None, bos)
    cls = classify(r_ids, g_ids, texts=texts, stop_ids=stop_ids, special_ids=special_ids, bos_id=bos_id)
    _back, exp, act, start = window(ids, prompt, i1, j1)
    sampled = sum(mask[i1:i2])
    change = f"{texts[0][:40]!r} became {texts[1][:40]!r}" if texts else "other ids"
    message = f"the engine's prompt for turn {turn} does not hold {what} at position {j1}: {change}"
    return Divergence(owner, j1, cls, "context", message, i1, exp, act, start, tokens=sampled), min(end, len(prompt))
