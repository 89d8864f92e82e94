"""Compare what was trained with what a correct loop holds, token by token.

Two references:
- ``against_reference``: a rebuilt token buffer (the prompt, the sampled ids, the template's deltas), which
  needs the episode's messages and renders; every position of the trained sequence is accounted for;
- ``against_sampled``: only the sampled turns (no renders, what the run-time guard does): each turn must be in
  the trained sequence verbatim with ``loss_mask`` 1 on exactly its ids.

``against_reference`` aligns the two id sequences with the fewest inserted and deleted ids (``align``, Myers'
diff), each edit at the first position that differs, so a divergence is named where a common-prefix scan of the
two would name it; ``against_sampled`` places the sampled runs with the audit's ``IdMatcher``. Both report per
turn the first divergence, plus counts: trained tokens never sampled, sampled tokens not trained, mask flips.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from tito_audit.policy.view import mask_runs
from tito_audit.replay.divergence import Divergence, classify, run_text, window
from tito_audit.replay.id_diff import align
from tito_audit.report.align import IdMatcher
from tito_audit.report.finding_class import ReasoningMarks


@dataclass
class Comparison:
    trained_not_sampled: int = 0  # trained positions (loss_mask 1) that no sampled id accounts for
    sampled_not_trained: int = 0  # sampled ids that are not trained (missing, changed, or masked out)
    mask_flips: int = 0  # same id at the same place, loss_mask differs from the sampled/not-sampled truth
    divergences: list[Divergence] = field(default_factory=list)  # first per turn, in turn order
    logprob_mass: float = 0.0  # engine log-probs summed over affected sampled ids (0 when the log has none)
    logprob_tokens: int = 0  # affected sampled ids that had a log-prob

    @property
    def ok(self) -> bool:
        return not self.divergences


class _Turns:
    """Which turn owns a reference position: turn k owns (end of sampled k-1, end of sampled k]."""

    def __init__(self, spans: Sequence[tuple[int, int]]) -> None:
        self.ends = [e for _, e in spans]

    def of(self, ref_pos: int) -> int:
        k = bisect.bisect_right(self.ends, ref_pos)
        return min(k, max(0, len(self.ends) - 1))


def _describe(kind: str, cls: str, ref_text: str | None, got_text: str | None) -> str:
    if kind == "mask":
        return "loss_mask differs from what was sampled"
    if ref_text is None:
        return "trained ids differ from the sampled buffer"
    if not got_text:
        return f"the trained sequence lacks {ref_text!r}"
    if not ref_text:
        return f"the trained sequence has {got_text!r} that the buffer does not"
    same = " (same text, other ids)" if ref_text == got_text else ""
    return f"trained {got_text!r} where the buffer has {ref_text!r}{same}"


def against_reference(
    ref: Sequence[int],
    ref_mask: Sequence[int],
    ref_logprobs: Sequence[float | None] | None,
    spans: Sequence[tuple[int, int]],
    got: Sequence[int],
    got_mask: Sequence[int] | None,
    *,
    decode: Callable[[Sequence[int]], str] | None,
    stop_ids: Sequence[int],
    special_ids: Sequence[int] = (),
    bos_id: int | None = None,
    bos_ids: Collection[int] = (),
    reasoning: ReasoningMarks | None = None,
) -> Comparison:
    """``got`` (and its mask) against a rebuilt buffer ``ref`` whose sampled runs are ``spans``. ``bos_ids``: every
    id that begins a sequence (the tokenizer's and the template's), so that a doubled one is named whatever
    ``bos_id`` says. ``reasoning``: what reasoning looks like in this episode (its classes tell it from content).

    Per turn the first divergence is kept, with every class the turn's differing runs hold (``Divergence.classes``):
    a turn re-encoded and cut at its stop token counts as both, so that no class hides another."""
    walk = _Walk(ref, ref_mask, ref_logprobs, spans, got, got_mask,
                 _Classes(decode, stop_ids, special_ids, bos_id, bos_ids, reasoning))  # fmt: skip
    for tag, i1, i2, j1, j2 in align(ref, got):
        if tag == "equal":
            walk.equal_run(i1, i2, j1, j2)
        else:
            walk.differing_run(i1, i2, j1, j2)
    walk.out.divergences = [walk.first[k] for k in sorted(walk.first)]
    return walk.out


@dataclass
class _Classes:
    """How the runs of a comparison are named: the audit's rule (``classify``) on the ids and their texts."""

    decode: Callable[[Sequence[int]], str] | None
    stop_ids: Sequence[int]
    special_ids: Sequence[int]
    bos_id: int | None
    bos_ids: Collection[int]
    reasoning: ReasoningMarks | None

    def texts(
        self, ref: Sequence[int], i1: int, i2: int, got: Sequence[int], j1: int, j2: int
    ) -> tuple[str, str] | None:
        return (run_text(self.decode, ref, i1, i2), run_text(self.decode, got, j1, j2)) if self.decode else None

    def of_run(self, ref: Sequence[int], i1: int, i2: int, got: Sequence[int], j1: int, j2: int) -> list[str]:
        """The class of ``ref[i1:i2]`` against ``got[j1:j2]``, then the class of what remains once the stop ids at
        the run's edges are set apart (a turn re-encoded whose stop token was also cut is ``stop_seam`` and
        ``non_canonical``), when something differs there."""
        r_ids, g_ids = list(ref[i1:i2]), list(got[j1:j2])
        bos = bos_of(r_ids, g_ids, self.bos_id, self.bos_ids)
        cls = classify(r_ids, g_ids, texts=self.texts(ref, i1, i2, got, j1, j2), stop_ids=self.stop_ids,
                       special_ids=self.special_ids, bos_id=bos, reasoning=self.reasoning)  # fmt: skip
        if cls != "stop_seam":
            return [cls]
        a1, a2 = _inside_stops(ref, i1, i2, self.stop_ids)
        b1, b2 = _inside_stops(got, j1, j2, self.stop_ids)
        if (a1, a2, b1, b2) == (i1, i2, j1, j2) or list(ref[a1:a2]) == list(got[b1:b2]) or not (a2 > a1 and b2 > b1):
            return [cls]
        rest = classify(list(ref[a1:a2]), list(got[b1:b2]), texts=self.texts(ref, a1, a2, got, b1, b2),
                        stop_ids=self.stop_ids, special_ids=self.special_ids, bos_id=self.bos_id,
                        reasoning=self.reasoning)  # fmt: skip
        return [cls] if rest == cls else [cls, rest]


def _inside_stops(seq: Sequence[int], i1: int, i2: int, stop_ids: Collection[int]) -> tuple[int, int]:
    """``seq[i1:i2]`` without the stop ids at its two edges."""
    stops = set(stop_ids)
    while i1 < i2 and seq[i1] in stops:
        i1 += 1
    while i2 > i1 and seq[i2 - 1] in stops:
        i2 -= 1
    return i1, i2


class _Walk:
    """One pass over the alignment of ``got`` with ``ref``: the counts, and per turn the first divergence with every
    class its runs hold."""

    def __init__(
        self,
        ref: Sequence[int],
        ref_mask: Sequence[int],
        ref_logprobs: Sequence[float | None] | None,
        spans: Sequence[tuple[int, int]],
        got: Sequence[int],
        got_mask: Sequence[int] | None,
        classes: _Classes,
    ) -> None:
        self.ref, self.ref_mask, self.ref_logprobs, self.got, self.got_mask = ref, ref_mask, ref_logprobs, got, got_mask
        self.ref_mask_l = list(ref_mask)
        self.got_mask_l = list(got_mask) if got_mask is not None else []
        self.turns = _Turns(spans)
        self.classes = classes
        self.out = Comparison()
        self.first: dict[int, Divergence] = {}

    def gmask(self, j: int) -> int:
        return self.got_mask_l[j] if j < len(self.got_mask_l) else 0

    def affected(self, i: int) -> None:
        lp = self.ref_logprobs[i] if self.ref_logprobs is not None and i < len(self.ref_logprobs) else None
        if lp is not None:
            self.out.logprob_mass += lp
            self.out.logprob_tokens += 1

    def note(self, turn: int, classes: list[str], make: Callable[[str], Divergence]) -> Divergence:
        """The turn's first divergence (made with the first class when the turn has none yet), holding ``classes``."""
        cur = self.first.get(turn)
        if cur is None:
            cur = self.first[turn] = make(classes[0])
        for c in classes:
            if c not in cur.classes:
                cur.classes.append(c)
        return cur

    def equal_run(self, i1: int, i2: int, j1: int, j2: int) -> None:
        """Equal ids: only their loss mask can differ (a mask flip)."""
        run_mask = self.got_mask_l[j1:j2]
        if self.got_mask is None or self.ref_mask_l[i1:i2] == run_mask + [0] * (j2 - j1 - len(run_mask)):
            return
        ref, got = self.ref, self.got
        for off in range(i2 - i1):
            i, j = i1 + off, j1 + off
            rm, gm = self.ref_mask[i], self.gmask(j)
            if rm == gm:
                continue
            self.out.mask_flips += 1
            if rm:
                self.out.sampled_not_trained += 1
                self.affected(i)
            else:
                self.out.trained_not_sampled += 1
            cls = classify([ref[i]], [], texts=None, stop_ids=self.classes.stop_ids, mask_only=True)

            def make(c: str, i: int = i, j: int = j, rm: int = rm, gm: int = gm) -> Divergence:
                _back, exp, act, start = window(ref, got, i, j)
                what = "sampled id not trained" if rm else "trained id that was never sampled"
                decode = self.classes.decode
                tok = decode([ref[i]]) if decode else str(ref[i])
                return Divergence(
                    self.turns.of(i), j, c, "mask", f"{what}: {tok!r} has loss_mask {gm}", i, exp, act, start
                )

            self.note(self.turns.of(i), [cls], make).tokens += rm

    def differing_run(self, i1: int, i2: int, j1: int, j2: int) -> None:
        """Ids inserted, dropped or replaced: every sampled id of the reference run is not trained as sampled."""
        sampled = sum(self.ref_mask[i1:i2])
        self.out.sampled_not_trained += sampled
        for i in range(i1, i2):
            if self.ref_mask[i]:
                self.affected(i)
        self.out.trained_not_sampled += sum(self.gmask(j) for j in range(j1, j2)) if self.got_mask is not None else 0
        ref, got, decode = self.ref, self.got, self.classes.decode
        turn = self.turns.of(i1)

        def make(cls: str) -> Divergence:
            r_text = run_text(decode, ref, i1, min(i2, i1 + 24)) if decode else None
            g_text = run_text(decode, got, j1, min(j2, j1 + 24)) if decode else None
            _back, exp, act, start = window(ref, got, i1, j1)
            return Divergence(turn, j1, cls, "ids", _describe("ids", cls, r_text, g_text), i1, exp, act, start)

        self.note(turn, self.classes.of_run(ref, i1, i2, got, j1, j2), make).tokens += sampled


def against_sampled(
    turns: Sequence[Sequence[int]],
    logprobs: Sequence[Sequence[float] | None],
    got: Sequence[int],
    got_mask: Sequence[int] | None,
    *,
    decode: Callable[[Sequence[int]], str] | None = None,
    stop_ids: Sequence[int] = (),
    special_ids: Sequence[int] = (),
    bos_id: int | None = None,
    bos_ids: Collection[int] = (),
    reasoning: ReasoningMarks | None = None,
) -> Comparison:
    """No renders: the sampled turns must appear verbatim in ``got``, trained exactly where they are.

    The context between the turns is taken from ``got`` itself, so a doubled BOS at its start is looked for on
    its own (``bos_ids`` and ``bos_id``: the ids that begin a sequence)."""
    out = _against_sampled(
        turns, logprobs, got, got_mask,
        decode=decode, stop_ids=stop_ids, special_ids=special_ids, bos_id=bos_id, bos_ids=bos_ids,
        reasoning=reasoning,
    )  # fmt: skip
    bos = {*bos_ids, *(() if bos_id is None else (bos_id,))}
    if len(got) >= 2 and got[0] in bos and got[1] in bos:
        turn0 = next((x for x in out.divergences if x.turn == 0), None)
        if turn0 is None or (turn0.index is not None and turn0.index > 1):
            cls = classify([], [got[1]], texts=None, stop_ids=stop_ids, bos_id=got[1])
            tok = decode([got[1]]) if decode else str(got[1])
            message = f"the trained sequence begins with {tok!r} twice"
            d = Divergence(0, 1, cls, "ids", message, 1, [got[0]], list(got[:7]), 0)
            out.divergences = sorted([d, *(x for x in out.divergences if x is not turn0)], key=lambda x: x.turn)
    return out


def _against_sampled(
    turns: Sequence[Sequence[int]],
    logprobs: Sequence[Sequence[float] | None],
    got: Sequence[int],
    got_mask: Sequence[int] | None,
    **kw: Any,
) -> Comparison:
    if got_mask is not None and len(got_mask) == len(got):
        runs = mask_runs(got_mask)
        if len(runs) == len(turns):
            if all(got[a:b] == list(t) for (a, b), t in zip(runs, turns, strict=True)):
                return Comparison()
            return _against_runs(turns, logprobs, runs, got, got_mask, **kw)
    # Slow path: build the reference "trained sequence" the sampled ids imply, by aligning them into ``got``.
    flat: list[int] = [t for turn in turns for t in turn]
    flat_lp: list[float | None] = []
    spans: list[tuple[int, int]] = []
    pos = 0
    for k, turn in enumerate(turns):
        lps = logprobs[k] if k < len(logprobs) else None
        flat_lp.extend(lps if lps is not None and len(lps) == len(turn) else [None] * len(turn))
        spans.append((pos, pos + len(turn)))
        pos += len(turn)
    # The reference: ``got`` with every aligned sampled run in place (mask 1), unaligned sampled ids inserted.
    ref: list[int] = []
    ref_mask: list[int] = []
    ref_lp: list[float | None] = []
    ref_spans: list[tuple[int, int]] = []
    matcher = IdMatcher(flat, got)
    owner = [k for k, (a, b) in enumerate(spans) for _ in range(a, b)]
    span_start: dict[int, int] = {}
    span_end: dict[int, int] = {}
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "insert":  # context the sampler never produced (prompt, deltas): untrained in a correct loop
            ref.extend(got[j1:j2])
            ref_mask.extend([0] * (j2 - j1))
            ref_lp.extend([None] * (j2 - j1))
            continue
        # equal: the sampled ids where they were trained; replace/delete: the sampled ids the trainer lacks
        for i in range(i1, i2):
            span_start.setdefault(owner[i], len(ref))
            ref.append(flat[i])
            ref_mask.append(1)
            ref_lp.append(flat_lp[i])
            span_end[owner[i]] = len(ref)
    for k in range(len(turns)):
        a = span_start.get(k, span_end.get(k - 1, 0) if k else 0)
        ref_spans.append((a, span_end.get(k, a)))
    return against_reference(ref, ref_mask, ref_lp, ref_spans, got, got_mask, **kw)


def _find(seq: Sequence[int], sub: Sequence[int], lo: int, hi: int, near: int) -> int | None:
    """The start of ``sub`` in ``seq[lo:hi]`` nearest to ``near``, or None."""
    if not sub:
        return None
    first, n = sub[0], len(sub)
    starts = [i for i in range(max(lo, 0), min(hi, len(seq)) - n + 1) if seq[i] == first and seq[i : i + n] == sub]
    return min(starts, key=lambda i: (abs(i - near), i)) if starts else None


def _against_runs(
    turns: Sequence[Sequence[int]],
    logprobs: Sequence[Sequence[float] | None],
    runs: Sequence[tuple[int, int]],
    got: Sequence[int],
    got_mask: Sequence[int],
    **kw: Any,
) -> Comparison:
    """One trained run per sampled turn: the reference is ``got`` with turn k put in place of run k, or where its
    ids sit verbatim next to the run (a mask that starts or ends off the turn: the first sampled token whose mask
    is wrong is then the divergence), so the alignment has only the real differences to find."""
    ref: list[int] = []
    ref_mask: list[int] = []
    ref_lp: list[float | None] = []
    spans: list[tuple[int, int]] = []
    pos = 0
    for k, ((a, b), turn) in enumerate(zip(runs, turns, strict=True)):
        t = list(turn)
        at = a if list(got[a : a + len(t)]) == t else _find(got, t, pos, b + len(t), a)
        if at is None:  # the trained ids differ: the turn replaces the run
            at, end = a, b
        else:
            end = at + len(t)
        at = max(at, pos)
        ref += got[pos:at]
        ref_mask += [0] * (at - pos)
        ref_lp += [None] * (at - pos)
        lps = logprobs[k] if k < len(logprobs) else None
        spans.append((len(ref), len(ref) + len(t)))
        ref += t
        ref_mask += [1] * len(t)
        ref_lp += list(lps) if lps is not None and len(lps) == len(t) else [None] * len(t)
        pos = max(end, pos)
    ref += got[pos:]
    ref_mask += [0] * (len(got) - pos)
    ref_lp += [None] * (len(got) - pos)
    return against_reference(ref, ref_mask, ref_lp, spans, got, got_mask, **kw)


def bos_of(ref: Sequence[int], got: Sequence[int], bos_id: int | None, bos_ids: Collection[int]) -> int | None:
    """The BOS id an inserted or dropped run begins with, when it is one of ``bos_ids``; else ``bos_id``."""
    if not (ref and got):
        head = ref[0] if ref else got[0] if got else None
        if head is not None and head in bos_ids:
            return head
    return bos_id
