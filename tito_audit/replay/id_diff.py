"""The fewest inserted and deleted ids that turn one id sequence into another (Myers' diff), each edit at the
first position that differs, so that replay names a divergence where a common-prefix scan would. Past
``MAX_EDITS`` (a loop that trains on something unrelated to what it sampled) a linear-time heuristic aligns
instead, so one hopeless episode cannot stall a replay.
"""

from __future__ import annotations

from collections.abc import Sequence

from tito_audit.rollout.tokens import common_prefix_len

MAX_EDITS = 512  # beyond this many inserted + deleted ids, a linear-time heuristic aligns instead
SYNC = 16  # the heuristic: ids that must agree again after an edit (fewer near the end)
SEARCH = 4096  # how far ahead a resynchronisation is looked for
AGREE = 512  # agreement after an edit that counts in choosing it

Opcode = tuple[str, int, int, int, int]


def _resync(a: Sequence[int], i: int, b: Sequence[int], j: int) -> tuple[int, int] | None:
    """The edit ``(k, l)`` after which ``a[i+k:]`` and ``b[j+l:]`` agree again: smallest ``k + l`` minus how long
    they then agree (up to ``AGREE``). Agreement needs ``SYNC`` ids (fewer at the ends)."""
    la, lb = min(SEARCH, len(a) - i), min(SEARCH, len(b) - j)
    n = min(SYNC, la, lb)
    while n > 0:  # near the end of a sequence fewer ids are left to agree on
        found = _resync_n(a, i, b, j, la, lb, n)
        if found is not None:
            return found
        n //= 2
    return None


def _resync_n(a: Sequence[int], i: int, b: Sequence[int], j: int, la: int, lb: int, n: int) -> tuple[int, int] | None:
    where: dict[tuple[int, ...], list[int]] = {}
    for l in range(lb - n + 1):  # noqa: E741
        where.setdefault(tuple(b[j + l : j + l + n]), []).append(l)
    best: tuple[int, int] | None = None
    best_score = 0
    for k in range(la - n + 1):
        if best is not None and k - AGREE >= best_score:
            break
        for l in where.get(tuple(a[i + k : i + k + n]), ()):  # noqa: E741
            if best is not None and k + l - AGREE >= best_score:
                break
            agree = common_prefix_len(a[i + k : i + k + AGREE], b[j + l : j + l + AGREE])
            score = k + l - agree
            if best is None or score < best_score:
                best, best_score = (k, l), score
    return best


def _greedy_opcodes(a: list[int], b: list[int]) -> list[Opcode]:
    """Left to right: the longest common prefix, then the heuristic's edit after which both agree again."""
    ops: list[Opcode] = []
    i = j = 0
    while i < len(a) or j < len(b):
        p = common_prefix_len(a[i:], b[j:])
        if p:
            ops.append(("equal", i, i + p, j, j + p))
            i, j = i + p, j + p
            continue
        at = _resync(a, i, b, j)
        k, l = at if at is not None else (len(a) - i, len(b) - j)  # noqa: E741
        tag = "replace" if k and l else ("delete" if k else "insert")
        ops.append((tag, i, i + k, j, j + l))
        i, j = i + k, j + l
    return ops


Edit = tuple[int, int, bool, int, int]  # (x, y) where it starts, inserted (else deleted), (x, y) its snake reaches


def _myers(a: list[int], b: list[int], max_edits: int) -> list[Edit] | None:
    """Myers' O(ND) shortest edit script (insertions and deletions of ids) turning ``a`` into ``b``, first edit
    first; None past ``max_edits`` edits. Every edit is followed by the longest run of equal ids, so each edit
    sits at the first position that the alignment before it cannot match."""
    n, m = len(a), len(b)
    off = max_edits + 1
    v = [0] * (2 * off + 1)
    trace: list[list[int]] = []
    for d in range(max_edits + 1):
        for k in range(-d, d + 1, 2):
            down = k == -d or (k != d and v[off + k - 1] < v[off + k + 1])  # an id of b inserted, else one of a deleted
            x = v[off + k + 1] if down else v[off + k - 1] + 1
            y = x - k
            if x < n and y < m and a[x] == b[y]:
                x += _snake(a, b, x, y)
                y = x - k
            v[off + k] = x
            if x >= n and y >= m:
                return _backtrack(trace, d, x, y)
        trace.append(v[off - d : off + d + 1])
    return None


def _snake(a: list[int], b: list[int], x: int, y: int) -> int:
    """How many ids ``a[x:]`` and ``b[y:]`` share at their start: compared in doubling slices, so a long run costs
    few Python steps and a short one copies little (slicing the whole remainder each time would be O(N) a step)."""
    n = min(len(a) - x, len(b) - y)
    s, step = 0, 8
    while s < n:
        e = min(n, s + step)
        if a[x + s : x + e] != b[y + s : y + e]:
            while a[x + s] == b[y + s]:
                s += 1
            return s
        s, step = e, 2 * step
    return n


def _backtrack(trace: list[list[int]], d: int, x: int, y: int) -> list[Edit]:
    """The edits of the path that reached ``(x, y)`` with ``d`` edits (``trace[e]``: v after ``e`` edits)."""
    edits: list[Edit] = []
    for e in range(d, 0, -1):
        prev = trace[e - 1]  # indexed from k = -(e - 1)
        k = x - y
        down = k == -e or (k != e and prev[k - 1 + e - 1] < prev[k + 1 + e - 1])
        pk = k + 1 if down else k - 1
        px = prev[pk + e - 1]
        edits.append((px, px - pk, down, x, y))
        x, y = px, px - pk
    return edits[::-1]


def _edit_opcodes(n: int, m: int, edits: list[Edit], base: int) -> list[Opcode]:
    """Consecutive edits become one difflib-style opcode; the runs of equal ids around them ``equal``."""
    ops: list[Opcode] = []
    x = y = 0
    run: tuple[int, int] | None = None  # where the current run of edits began

    def equal_to(ex: int, ey: int) -> None:
        nonlocal run, x, y
        if (ex, ey) == (x, y):
            return
        if run is not None:
            i1, j1 = run
            tag = "replace" if x > i1 and y > j1 else ("delete" if x > i1 else "insert")
            ops.append((tag, i1 + base, x + base, j1 + base, y + base))
            run = None
        ops.append(("equal", x + base, ex + base, y + base, ey + base))
        x, y = ex, ey

    for px, py, down, ex, ey in edits:
        equal_to(px, py)
        if run is None:
            run = (px, py)
        x, y = (px, py + 1) if down else (px + 1, py)
        equal_to(ex, ey)
    if run is not None:
        i1, j1 = run
        tag = "replace" if x > i1 and y > j1 else ("delete" if x > i1 else "insert")
        ops.append((tag, i1 + base, x + base, j1 + base, y + base))
    equal_to(n, m)
    return ops


def align(a: Sequence[int], b: Sequence[int]) -> list[Opcode]:
    """difflib-style opcodes turning ``a`` into ``b`` with the fewest inserted and deleted ids (Myers). Runs of
    equal ids are taken as long as they go before each edit, so an edit sits at the first position that differs
    (an id run inserted after a copy of itself is the later copy, as a common-prefix scan places it). Past
    ``MAX_EDITS`` edits, a linear-time left-to-right heuristic."""
    a, b = list(a), list(b)
    p = common_prefix_len(a, b)
    if p == len(a) == len(b):
        return [("equal", 0, p, 0, p)] if p else []
    core_a, core_b = a[p:], b[p:]
    edits = _myers(core_a, core_b, MAX_EDITS)
    if edits is None:
        return _greedy_opcodes(a, b)
    ops: list[Opcode] = [("equal", 0, p, 0, p)] if p else []
    return ops + _edit_opcodes(len(core_a), len(core_b), edits, p)
