"""No class hides another in a turn (issue 38, item 3).

A loop that decodes each sampled turn with ``skip_special_tokens=True`` and encodes the text again trains, for a
turn the sampler split non-canonically, other ids for the split *and* no stop token: one run of the alignment holds
both (``'".<|im_end|>'`` trained as ``'".'``). Its first class is ``stop_seam``; the turn was re-encoded too, and the
class summary must count it as ``non_canonical`` as well, agreeing with ``replay_noncanonical``.
"""

from __future__ import annotations

from tests.conftest import write_jsonl
from tests.replay.conftest import QWEN
from tito_audit.replay import build_report, replay_log
from tito_audit.testing.synthetic import log_episode


def _decoded_and_encoded_again(p, renderer) -> tuple[dict, int]:
    """The record of a loop that re-encodes every split turn from its text without special tokens."""
    ids, mask = list(p.traj.input_ids), list(p.traj.loss_mask)
    spans = p.traj.sampled_spans()
    changed = 0
    for k in reversed(range(len(spans))):  # from the end: earlier spans keep their places
        if p.splits[k] is None:
            continue
        a, b = spans[k]
        again = renderer.encode(renderer.decode(ids[a:b], skip_special_tokens=True))
        ids[a:b], mask[a:b] = again, [1] * len(again)
        changed += 1
    record = log_episode(p, "correct", p.scenario.id).record
    record["input_ids"], record["loss_mask"] = ids, mask
    return record, changed


def test_a_turn_re_encoded_and_cut_at_its_stop_counts_in_both_classes(plays, loaded, tmp_path):
    model, ctx, played = plays(QWEN, 0.5, 0)
    rows, changed = [], 0
    for p in played:
        record, n = _decoded_and_encoded_again(p, ctx.renderer)
        rows.append(record)
        changed += n
    totals = replay_log(write_jsonl(tmp_path / "log.jsonl", rows), ctx)
    checks = {c.id: c for c in build_report(totals, model, "log", ctx.renderer.token_texts).models[0].checks}
    assert changed > 10
    assert totals.noncanonical_turns == changed  # every re-encoded turn was sampled with a split
    # every re-encoded turn is counted as re-encoded, and as cut at its stop: the summary agrees with the check
    assert totals.by_class["non_canonical"] == changed
    assert totals.by_class["stop_seam"] == changed
    assert totals.diverged_turns == changed
    assert f"non_canonical {changed}" in checks["replay_divergence"].summary
    assert f"{changed} of {totals.turns} sampled turns" in checks["replay_noncanonical"].findings[0].message
    # the findings named stop_seam say what else the turn holds
    folded = [f for f in checks["replay_divergence"].findings if f.cls == "stop_seam"]
    assert folded and all("(this turn also: non_canonical)" in f.message for f in folded)
