"""``replay --weights``: the red team's wrong answers (RW-1..RW-6, branch redteam-weights), each now named or
refused. Same policy, logs and helpers as ``test_replay_weights`` (a random Qwen3 2x32 built from a config,
the audit's played scenarios on Qwen3-0.6B's tokenizer); what each test expects is computed here."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.generation.logits_process import TopPLogitsWarper
from typer.testing import CliRunner

from tests.conftest import snapshot, write_jsonl
from tests.replay.weights.conftest import QWEN3, checks, records, replay_json
from tito_audit.cli import app
from tito_audit.formats.json import to_json
from tito_audit.policy.generation import GenerationSettings
from tito_audit.policy.sampler_distribution import process_logits
from tito_audit.replay.analyze import analyze
from tito_audit.replay.weights import tito_only
from tito_audit.replay.weights.select import select_episodes

# -- RW-1: the log's own sampler wins over a contradicting --sampling, and the contradiction is named ----------


def test_sampling_option_contradicting_the_log_is_named_and_the_log_wins(tmp_path, qwen3, policy):
    folder, model = policy
    _m, _ctx, played = qwen3
    rows = [r for r, _ in records(played[:3], "correct", model)]
    for r in rows:
        r["sampling"] = {"top_k": 20, "temperature": 0.7}
    _res, doc = replay_json(tmp_path, rows, "--weights", folder, "--ref", folder, "--only-tito", "--no-gradient",
                            "--sampling", '{"temperature": 1.0}')  # fmt: skip
    e = doc["models"][0]["replay"]["weights"]["estimators"]
    assert e["source"] == {"log": 3} and e["sampling"] == {"temperature 0.7, top_k 20": 3} and e["pure"] is False
    assert e["truncated_mass"] > 0.5  # top-20 of a 151k vocabulary: what the engine really drew from
    (conflict,) = e["conflicts"]
    assert conflict["episodes"] == 3 and conflict["log"] == "temperature 0.7, top_k 20"
    assert conflict["sampling_option"].startswith("pure sampling")
    c = checks(doc)["replay_kl_estimators"]
    assert c["status"] == "warn"
    assert any("contradicts the log's own sampling object" in f["message"] and "temperature 0.7" in f["message"]
               for f in c["findings"])  # fmt: skip
    # Records without a sampling object take --sampling (and say so).
    for r in rows:
        r.pop("sampling")
    _res, doc = replay_json(tmp_path, rows, "--weights", folder, "--only-tito", "--no-gradient", "--sampling", "{}")
    e = doc["models"][0]["replay"]["weights"]["estimators"]
    assert e["source"] == {"--sampling": 3} and e["conflicts"] == []


# -- RW-2: allowed_token_ids and single-token bad words change q; what is not modelled is refused -------------


def test_allowed_token_ids_and_bad_words_change_the_sampler(tmp_path, qwen3, policy):
    folder, model = policy
    _m, _ctx, played = qwen3
    rows = [r for r, _ in records(played[:2], "correct", model)]
    allowed = [151643, 151645, 198, 13]
    _res, doc = replay_json(tmp_path, rows, "--weights", folder, "--ref", folder, "--only-tito", "--no-gradient",
                            "--sampling", json.dumps({"allowed_token_ids": allowed}))  # fmt: skip
    e = doc["models"][0]["replay"]["weights"]["estimators"]
    assert e["pure"] is False and checks(doc)["replay_kl_estimators"]["status"] == "warn"
    # The truncated mass is the policy's mass outside the 4 ids, computed here from a plain forward.
    ids = rows[0]["input_ids"]
    with torch.no_grad():
        p = torch.softmax(model(input_ids=torch.tensor([ids])).logits[0].double(), -1)
    outside = 1 - p[:, allowed].sum(-1)
    assert e["truncated_mass_max"] > 0.99 and float(outside.min()) > 0.99
    banned = rows[0]["turns"][0]["ids"][0]
    _res, doc = replay_json(tmp_path, rows, "--weights", folder, "--only-tito", "--no-gradient",
                            "--sampling", json.dumps({"bad_words_ids": [[banned]]}))  # fmt: skip
    e = doc["models"][0]["replay"]["weights"]["estimators"]
    assert e["pure"] is False and e["truncated_mass_max"] > 0  # the banned token carried mass where it was drawn


@pytest.mark.parametrize(
    ("sampling", "message"),
    [
        ('{"bad_words_ids": [[10, 11]]}', "multi-token bad word"),
        ('{"bad_words": ["hello"]}', "bad_words (strings)"),
        ('{"allowed_token_ids": []}', "allowed_token_ids is empty"),
        ('{"allowed_token_ids": [true]}', "allowed_token_ids must be a list of token ids"),
        ('{"logit_bias": {"5": 2.0}}', "unsupported key(s) logit_bias"),
        # RW-6: non-finite or mistyped values
        ('{"temperature": NaN}', "temperature must be a finite number"),
        ('{"temperature": Infinity}', "temperature must be a finite number"),
        ('{"top_p": NaN}', "top_p must be a finite number"),
        ('{"top_k": true}', "top_k must be a number, not true"),
        ('{"top_k": 2.5}', "top_k must be an integer"),
        ('{"temperature": "0.7"}', "temperature must be a number"),
        ('{"min_p": NaN}', "min_p must be a finite number"),
    ],
)
def test_sampler_keys_not_modelled_and_bad_values_are_refused_in_one_line(tmp_path, sampling, message):
    log = write_jsonl(tmp_path / "log.jsonl", [{"turns": [[1]], "input_ids": [1], "loss_mask": [1]}])
    res = CliRunner().invoke(app, ["replay", str(log), "-m", str(snapshot(QWEN3)), "-w", "1", "-q", "--weights", "x",
                                   "--sampling", sampling])  # fmt: skip
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1


def test_a_record_whose_sampler_is_not_modelled_leaves_the_estimators_unchecked(tmp_path, qwen3, policy):
    folder, model = policy
    _m, _ctx, played = qwen3
    rows = [r for r, _ in records(played[:2], "correct", model)]
    for r in rows:
        r["sampling"] = {"bad_words_ids": [[10, 11]]}
    _res, doc = replay_json(tmp_path, rows, "--weights", folder, "--only-tito", "--no-gradient", "--sampling", "{}")
    c = checks(doc)["replay_kl_estimators"]
    assert c["status"] == "not_applicable" and "multi-token bad word" in c["summary"]


# -- RW-3: the sample takes the diverged episodes first, and every summary says N of M ------------------------


def _mixed(played, model):
    clean = [r for r, _ in records(played, "correct", model)]
    broken = [(r, t) for r, t in records(played, "naive_retokenize", model) if t]
    for n, r in enumerate(clean):
        r["id"] = f"clean{n}"
    for n, (r, _t) in enumerate(broken):
        r["id"] = f"broken{n}"
    return clean + [r for r, _ in broken], len(broken)


def test_the_sample_holds_the_diverged_episodes_first(tmp_path, qwen3, policy):
    _folder, model = policy
    _m, ctx, played = qwen3
    rows, n_broken = _mixed(played, model)
    assert n_broken >= 3
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    check = tito_only(ctx)
    truth = [analyze(s.episode, check).diverged for s in select_episodes([log], ctx)]
    assert sum(truth) == n_broken  # the broken episodes are the diverged ones
    for k in (n_broken - 1, n_broken, n_broken + 2):
        picked = list(select_episodes([log], ctx, max_episodes=k, diverged=lambda ep: analyze(ep, check).diverged))
        again = list(select_episodes([log], ctx, max_episodes=k, diverged=lambda ep: analyze(ep, check).diverged))
        lines = [s.episode.line for s in picked]
        assert lines == [s.episode.line for s in again] and lines == sorted(lines) and len(lines) == k
        assert sum(truth[line - 1] for line in lines) == min(k, n_broken)


def test_a_sampled_gradient_check_names_the_episodes_it_did_not_measure(tmp_path, qwen3, policy):
    folder, model = policy
    _m, _ctx, played = qwen3
    rows, n_broken = _mixed(played, model)
    _res, doc = replay_json(tmp_path, rows, "--weights", folder, "--max-episodes", str(n_broken), "--only-tito")
    w = doc["models"][0]["replay"]["weights"]
    assert w["episodes"]["run"] == n_broken and w["episodes"]["diverged"] == n_broken
    assert w["gradient"]["differ"] == n_broken  # every diverged episode measured: none passed as identical
    c = checks(doc)
    total = len(rows)
    for cid in ("replay_gradient", "replay_numeric_drift"):
        s = c[cid]["summary"]
        assert f"{n_broken} of {total} episode(s) measured" in s, s
        assert f"{total - n_broken} episode(s) not measured" in s and f"{n_broken} of the log's {n_broken}" in s
    assert c["replay_gradient"]["status"] == "warn"


# -- RW-4: trained tokens with no engine log-prob are counted per class; at divergent positions, not a pass -----


def test_missing_log_probs_at_divergent_positions_are_named_not_called_numeric(tmp_path, qwen3, policy):
    folder, model = policy
    _m, _ctx, played = qwen3
    recs = records(played, "naive_retokenize", model, dtype=torch.bfloat16)
    dropped = 0
    rows = []
    for p, (rec, truth) in zip(played, recs, strict=True):
        rec = json.loads(json.dumps(rec))
        if truth:
            for turn, split in zip(rec["turns"], p.splits, strict=True):
                if split is not None:  # the turns the loop did not keep verbatim
                    turn.pop("logprobs")
                    dropped += 1
        rows.append(rec)
    assert dropped >= 3
    _res, doc = replay_json(tmp_path, rows, "--weights", folder, "--only-tito", "--no-gradient",
                            "--numeric-drift-threshold", "0.0001")  # fmt: skip
    a = doc["models"][0]["replay"]["weights"]["attribution"]
    by_class = a["no_logprob_by_class"]
    assert by_class["never_sampled"] > 0 and a["no_logprob_tokens"] == sum(by_class.values())
    c = checks(doc)["replay_numeric_drift"]
    assert c["status"] == "warn"
    messages = [f["message"] for f in c["findings"]]
    assert not any("not a token bug" in m for m in messages)
    divergent = by_class["tito"] + by_class["never_sampled"]
    assert any(f"{divergent} trained token(s) at divergent positions" in m for m in messages)
    assert f"{a['no_logprob_tokens']} trained token(s) with no engine log-prob" in c["summary"]


# -- RW-5: top-p keeps what transformers' TopPLogitsWarper keeps, ties at the boundary included ----------------


def _q(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    return process_logits(logits, GenerationSettings(top_p=top_p)).softmax(-1)


def test_top_p_at_an_exact_boundary_drops_the_token_as_transformers_does():
    logits = torch.tensor([[0.5, 0.25, 0.25]]).log()
    assert torch.equal(_q(logits, 0.5), torch.tensor([[1.0, 0.0, 0.0]]))
    hf = TopPLogitsWarper(0.5)(torch.zeros(1, 1, dtype=torch.long), logits.clone()).softmax(-1)
    assert torch.equal(_q(logits, 0.5), hf)


@settings(max_examples=200, deadline=None)
@given(
    weights=st.lists(st.integers(1, 8), min_size=1, max_size=8),
    top_p=st.sampled_from([0.1, 0.125, 0.2, 0.25, 0.3, 0.375, 0.5, 0.6, 0.625, 0.75, 0.8, 0.875, 0.9, 0.95, 0.99]),
)
def test_top_p_support_equals_transformers_top_p_warper(weights, top_p):
    """Small distributions with dyadic masses, so the cumulative mass hits top_p exactly (and ties) often."""
    probs = torch.tensor([weights], dtype=torch.float64)
    logits = (probs / probs.sum()).log()
    ours = torch.isfinite(process_logits(logits, GenerationSettings(top_p=top_p)))
    theirs = torch.isfinite(TopPLogitsWarper(top_p)(torch.zeros(1, 1, dtype=torch.long), logits.clone()))
    assert torch.equal(ours, theirs)


# -- RW-6: (bad --sampling values: with RW-2's refusals above) the JSON report never holds NaN -----------------


def test_the_json_report_writes_non_finite_numbers_as_null():
    report = SimpleNamespace(to_dict=lambda: {"a": math.nan, "b": [1.0, math.inf, {"c": -math.inf}], "d": (2.5,)})
    text = to_json(report)  # type: ignore[arg-type]

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in the JSON report")

    assert json.loads(text, parse_constant=refuse) == {"a": None, "b": [1.0, None, {"c": None}], "d": [2.5]}
