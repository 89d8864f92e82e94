"""The alignment replay names divergences with: a valid, minimal edit script, each edit at the first position
that differs (where the synthetic loops' common-prefix truth puts it)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tito_audit.replay.id_diff import align

ids = st.lists(st.integers(0, 3), max_size=14)


def lcs(a: list[int], b: list[int]) -> int:
    row = [0] * (len(b) + 1)
    for x in a:
        prev = 0
        for j, y in enumerate(b):
            prev, row[j + 1] = row[j + 1], prev + 1 if x == y else max(row[j + 1], row[j])
    return row[-1]


@settings(max_examples=400, deadline=None)
@given(ids, ids)
def test_opcodes_rebuild_b_with_the_fewest_edits(a, b):
    ops = align(a, b)
    i = j = edits = 0
    out: list[int] = []
    for tag, i1, i2, j1, j2 in ops:
        assert (i1, j1) == (i, j)  # contiguous, in order
        if tag == "equal":
            assert a[i1:i2] == b[j1:j2]
        else:
            edits += (i2 - i1) + (j2 - j1)
        out += b[j1:j2]
        i, j = i2, j2
    assert (i, j) == (len(a), len(b)) and out == b
    assert edits == len(a) + len(b) - 2 * lcs(a, b)


def test_a_run_inserted_after_a_copy_of_itself_is_the_later_copy():
    turn, delta = [7, 8, 9], [1, 2]
    ref = [0, *turn, *delta, *turn]
    got = [0, *turn, *turn, *delta, *turn]  # the previous turn duplicated (as an incremental string diff does)
    assert [op for op in align(ref, got) if op[0] != "equal"] == [("insert", 4, 4, 4, 7)]


def test_edits_in_two_places_stay_two_edits():
    ref = [5, 1, 1, 1, 9, 6, 2, 2, 2, 9]
    got = [5, 9, 6, 9]  # each turn's content dropped, the seams kept
    assert [op[0] for op in align(ref, got) if op[0] != "equal"] == ["delete", "delete"]
