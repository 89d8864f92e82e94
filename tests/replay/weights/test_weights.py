"""``replay --weights`` (issue 29): the user's own policy on the replayed episodes.

The policy is a small real-architecture model (Qwen3's, the full 151,936-row vocabulary) built from a config and
written with ``save_pretrained``; the logs are the audit's scenarios played through ``Trajectory`` on
Qwen3-0.6B's tokenizer and template (``replay.synthetic``), and their engine log-probs are written here by that
same model, with a forward of its own (full logits, one sequence at a time) in float32 or in bfloat16. What each
test expects is computed here from the ids (a common-prefix scan, the injected truth), never by the code under test.
"""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoModelForCausalLM
from typer.testing import CliRunner

from tests.conftest import snapshot, tiny_qwen3_config, write_jsonl
from tests.replay.weights.conftest import QWEN3, VOCAB, checks, records, replay_json, run_api
from tito_audit.cli import app
from tito_audit.policy.generation import GenerationSettings
from tito_audit.policy.model import VocabMap
from tito_audit.replay.weights import Policy, analyze_pairs
from tito_audit.replay.weights.logprobs import Row, row_logps, takes_packed_keep
from tito_audit.replay.weights.pairs import NO_CONTEXT, Pair
from tito_audit.replay.weights.select import select_episodes
from tito_audit.rollout.tokens import common_prefix_len

# -- item 1 and 2: a correct loop, a re-tokenizing loop, a bf16 engine, both at once ---------------------------


def test_correct_loop_is_numeric_zero_no_tito_and_gradient_bitwise_identical(tmp_path, qwen3, policy):
    folder, model = policy
    _m, _ctx, played = qwen3
    rows = [r for r, _ in records(played[:6], "correct", model)]
    res, doc = replay_json(tmp_path, rows, "--weights", folder, "--only-tito")
    assert res.exit_code == 0, res.output
    w = doc["models"][0]["replay"]["weights"]
    a = w["attribution"]["classes"]
    trained = sum(sum(r["loss_mask"][1:]) for r in rows)
    assert a["numeric"]["units"] == trained and a["numeric"]["mean_abs_dlogp"] < 1e-5
    assert a["tito"]["units"] == 0 and a["never_sampled"]["trained_tokens"] == 0
    g = w["gradient"]
    assert g["compared"] == len(rows) and g["bitwise_equal"] == len(rows) and g["differ"] == 0
    c = checks(doc)
    assert c["replay_numeric_drift"]["status"] == "pass" and c["replay_gradient"]["status"] == "pass"
    assert c["replay_kl_estimators"]["status"] == "not_applicable"  # no sampler given: said, not passed


def test_correct_loop_against_the_rebuilt_buffer_messages_only(qwen3, policy):
    """No prompt_ids: the template's buffer is the reference and the context the engine sampled in."""
    _folder, model = policy
    _m, ctx, played = qwen3
    recs = records(played[:6], "correct", model, prompts=False)
    t = run_api(recs, ctx, model)
    assert t.by_reference == {"buffer": 6}
    assert t.attribution.classes["numeric"].units > 0 and t.attribution.classes["tito"].units == 0
    assert t.attribution.classes["numeric"].max_abs < 1e-5
    assert t.gradient.compared == 6 and t.gradient.bitwise == 6


def test_retokenizing_loop_tito_exactly_from_the_divergent_positions_and_gradient_differs(qwen3, policy):
    _folder, model = policy
    _m, ctx, played = qwen3
    recs = records(played, "naive_retokenize", model)
    assert sum(bool(truth) for _, truth in recs) >= 3  # the sampler split tokens in several episodes
    t = run_api(recs, ctx, model)
    assert t.per_episode is not None
    for (rec, truth), (pair, a) in zip(recs, t.per_episode, strict=True):
        trained = [j for j, m in enumerate(rec["loss_mask"]) if m and j > 0]
        first = common_prefix_len(pair.trained_ids, pair.buffer_ids)  # the first position that differs
        assert set(a.numeric) == {j for j in trained if j < first}
        assert all(abs(d) < 1e-5 for d in a.numeric.values())
        assert set(a.tito) | set(a.never_sampled) == {j for j in trained if j >= first}
        if not truth:
            assert not a.tito and not a.never_sampled
            continue
        assert first == truth[0].index
        # The trained-never-sampled ids are exactly the re-encoded ones the loop injected, one per split.
        assert sorted(a.never_sampled) == sorted(x.index for x in truth)
        assert len(a.never_sampled_runs) == len(truth)
        assert sum(abs(d) for d in a.tito.values()) > 0
    diverged = {rec["id"] for rec, truth in recs if truth}
    assert {e["episode"].split("(")[1].rstrip(")") for e in t.gradient.kept} == diverged
    assert t.gradient.differ == len(diverged) and t.gradient.identical == len(recs) - len(diverged)
    assert all(e["rel_error"] > 1e-3 and e["class"] == "non_canonical" for e in t.gradient.kept)
    assert math.isclose(sum(v["share"] for v in t.gradient.to_dict()["groups"].values()), 1.0, rel_tol=1e-9)


def test_bf16_engine_is_numeric_drift_only_and_the_threshold_gates(tmp_path, qwen3, policy):
    folder, model = policy
    _m, _ctx, played = qwen3
    recs = records(played, "correct", model, dtype=torch.bfloat16)
    fp32 = records(played, "correct", model)
    rows = [r for r, _ in recs]
    res, doc = replay_json(tmp_path, rows, "--weights", folder, "--only-tito", "--numeric-drift-threshold", "1e-4",
                           "--fail-on", "warn", "--no-gradient")  # fmt: skip
    a = doc["models"][0]["replay"]["weights"]["attribution"]["classes"]
    assert a["numeric"]["mean_abs_dlogp"] > 1e-4 and a["numeric"]["share"] == 1.0
    assert a["tito"]["units"] == 0 and a["never_sampled"]["units"] == 0
    c = checks(doc)
    drift = c["replay_numeric_drift"]
    assert drift["status"] == "warn" and drift["findings"][0]["class"] == "numeric"
    assert c["replay_gradient"]["status"] == "not_applicable"  # --no-gradient: said
    assert res.exit_code == 1  # the warning gates under --fail-on warn
    # The mean |Delta| is the bf16 engine's own error, computed here from the two forwards.
    expected = [
        abs(x - y)
        for (r, _), (q, _) in zip(fp32, recs, strict=True)
        for t32, t16 in zip(r["turns"], q["turns"], strict=True)
        for x, y in zip(t32["logprobs"], t16["logprobs"], strict=True)
    ]
    assert math.isclose(a["numeric"]["mean_abs_dlogp"], sum(expected) / len(expected), rel_tol=1e-3)
    res, doc = replay_json(tmp_path, rows, "--weights", folder, "--only-tito", "--numeric-drift-threshold", "10",
                           "--fail-on", "warn", "--no-gradient")  # fmt: skip
    assert checks(doc)["replay_numeric_drift"]["status"] == "pass" and res.exit_code == 0


def hand_attribution(p, rec, lp_train):
    """Classes and Deltas of one naive_retokenize episode, by hand: the trained sequence is the buffer with each
    split turn's ids replaced by the tokenizer's own (``p.canonical``); inside such a turn the common prefix and
    suffix of the two runs pair one to one, the middle is the re-encoded run (trained, never sampled) opposite the
    sampler's split (sampled, never trained). Before the first split: numeric; after it: TITO."""
    b, t, mask = p.traj.input_ids, rec["input_ids"], rec["loss_mask"]
    spans = p.traj.sampled_spans()
    engine = {
        i: x
        for (a, z), turn in zip(spans, rec["turns"], strict=True)
        for i, x in zip(range(a, z), turn["logprobs"], strict=True)
    }
    numeric: dict[int, float] = {}
    tito: dict[int, float] = {}
    runs: list[tuple[float, int]] = []
    never: set[int] = set()
    state = {"shift": 0, "diverged": False}

    def pair(i: int) -> None:
        j = i + state["shift"]
        assert t[j] == b[i]
        if j > 0 and mask[j] and i in engine:
            (tito if state["diverged"] else numeric)[j] = lp_train[j] - engine[i]

    prev = 0
    for k, ((a, z), split) in enumerate(zip(spans, p.splits, strict=True)):
        for i in range(prev, a):
            pair(i)
        prev = z
        if split is None:
            for i in range(a, z):
                pair(i)
            continue
        sampled, canonical = b[a:z], p.canonical[k]
        pre = common_prefix_len(sampled, canonical)
        suf = common_prefix_len(sampled[pre:][::-1], canonical[pre:][::-1])
        for i in range(a, a + pre):
            pair(i)
        trained_run = range(a + pre + state["shift"], a + len(canonical) - suf + state["shift"])
        never |= set(trained_run)
        runs.append(
            (sum(lp_train[j] for j in trained_run) - sum(engine[i] for i in range(a + pre, z - suf)), len(trained_run))
        )
        state["diverged"] = True
        state["shift"] += len(canonical) - len(sampled)
        for i in range(z - suf, z):
            pair(i)
    return numeric, tito, runs, never


def test_both_kinds_of_mismatch_in_one_log_are_separated_as_a_hand_computation_says(qwen3, policy):
    """A re-tokenizing trainer and a bf16 engine. Every Delta, class, mean, share and sequence-level k1/k3 is
    computed here from a plain float32 forward of the trained sequence, the logged bf16 log-probs and the
    injected edits; the numeric Deltas are also the bf16 engine's own error (fp32 engine minus bf16 engine)."""
    _folder, model = policy
    _m, ctx, played = qwen3
    recs = records(played, "naive_retokenize", model, dtype=torch.bfloat16)
    fp32 = records(played, "naive_retokenize", model)
    t = run_api(recs, ctx, model, gradient=False)
    assert t.per_episode is not None
    units: dict[str, list[list[float]]] = {"numeric": [], "tito": [], "never_sampled": []}
    never_tokens = 0
    for p, (rec, truth), (rec32, _), (pair, a) in zip(played, recs, fp32, t.per_episode, strict=True):
        with torch.no_grad():
            lp = torch.log_softmax(model(input_ids=torch.tensor([rec["input_ids"]])).logits[0].double(), -1)
        lp_train = [0.0] + [float(lp[j - 1, x]) for j, x in enumerate(rec["input_ids"]) if j > 0]
        numeric, tito, runs, never = hand_attribution(p, rec, lp_train)
        assert set(a.numeric) == set(numeric) and set(a.tito) == set(tito) and set(a.never_sampled) == never
        assert sorted(never) == sorted(x.index for x in truth)  # the injected truth agrees with the hand split
        for j, d in a.numeric.items():
            assert abs(d - numeric[j]) < 1e-4
        for j, d in a.tito.items():
            assert abs(d - tito[j]) < 1e-4
        assert len(a.never_sampled_runs) == len(runs)
        for (d, n), (hd, hn) in zip(a.never_sampled_runs, runs, strict=True):
            assert n == hn and abs(d - hd) < 1e-4
        engine16 = [x for turn in rec["turns"] for x in turn["logprobs"]]
        engine32 = [x for turn in rec32["turns"] for x in turn["logprobs"]]
        drift = dict(zip(pair.sampled_positions, [x - y for x, y in zip(engine32, engine16, strict=True)], strict=True))
        for j, d in a.numeric.items():
            if not truth or j < truth[0].index:
                assert abs(d - drift[j]) < 1e-4  # Delta = trainer (fp32) - engine (bf16) = the bf16 error
        units["numeric"].append(list(numeric.values()))
        units["tito"].append(list(tito.values()))
        units["never_sampled"].append([d for d, _ in runs])
        never_tokens += len(never)
    assert all(any(ep) for ep in units.values())  # all three classes present
    got = t.attribution.to_dict()["classes"]
    total = sum(abs(d) for eps in units.values() for ep in eps for d in ep)
    for cls, eps in units.items():
        flat = [d for ep in eps for d in ep]
        with_units = [ep for ep in eps if ep]
        c = got[cls]
        assert c["units"] == len(flat) and c["episodes"] == len(with_units)
        assert math.isclose(c["mean_abs_dlogp"], sum(map(abs, flat)) / len(flat), rel_tol=1e-4)
        assert math.isclose(c["share"], sum(map(abs, flat)) / total, rel_tol=1e-4)
        log_r = [max(-20.0, min(20.0, sum(ep))) for ep in with_units]  # the trainer's clamps (verl's)
        k1 = sum(-x for x in log_r) / len(with_units)
        k3 = sum(max(-10.0, min(10.0, math.expm1(x) - x)) for x in log_r) / len(with_units)
        tol = 2e-6 * max(map(len, with_units))  # float32 forwards: ~1e-6 per token, summed over a sequence
        assert math.isclose(c["k1_sequence"], k1, rel_tol=1e-3, abs_tol=tol)
        assert math.isclose(c["k3_sequence"], k3, rel_tol=1e-3, abs_tol=tol)
    assert got["never_sampled"]["trained_tokens"] == never_tokens and got["never_sampled"]["unpaired_tokens"] == 0


# -- item 3: the estimators' bias under a top-k sampler, by hand on a small vocabulary -------------------------


def test_top_k_estimator_bias_equals_a_hand_computation():
    torch.manual_seed(1)
    model = AutoModelForCausalLM.from_config(tiny_qwen3_config(12)).eval()
    with torch.no_grad():  # peakier logits: top-2 then keeps 50 to 75 % of the mass
        model.get_input_embeddings().weight.mul_(5.0)
    torch.manual_seed(2)
    ref = AutoModelForCausalLM.from_config(tiny_qwen3_config(12)).eval()
    ids = [1, 5, 3, 7, 2, 9, 4, 11, 6]
    mask = [0, 0, 0, 1, 1, 1, 0, 1, 1]  # two turns: (3, 6) and (7, 9)
    pair = Pair(1, "hand", "", ids, mask, reference="engine", buffer_ids=ids, buffer_mask=mask,
                engine_logprobs=[None] * 3 + [-1.0] * 3 + [None] + [-1.0] * 2, spans=[(3, 6), (7, 9)],
                sampled=[(ids[:6], 3, [-1.0] * 3), (ids, 7, [-1.0] * 2)],
                settings=GenerationSettings(top_k=2), settings_source="--sampling")  # fmt: skip
    t = analyze_pairs([pair], Policy.of(model, VocabMap.full(12), ref, gradient=False))
    with torch.no_grad():
        lp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].double(), -1).tolist()
        lr = torch.log_softmax(ref(input_ids=torch.tensor([ids])).logits[0].double(), -1).tolist()
    sums = {"kl": 0.0, "k1": 0.0, "k2": 0.0, "k3": 0.0, "truncated": 0.0}
    positions = [3, 4, 5, 7, 8]
    for j in positions:
        p = [math.exp(x) for x in lp[j - 1]]
        top = sorted(range(12), key=lambda v: -p[v])[:2]
        z = sum(p[v] for v in top)
        sums["kl"] += sum(p[v] * (lp[j - 1][v] - lr[j - 1][v]) for v in range(12))
        for v in top:
            q = p[v] / z
            log_r = max(-20.0, min(20.0, lr[j - 1][v] - lp[j - 1][v]))  # the trainer's clamps (verl's)
            sums["k1"] += q * -log_r
            sums["k2"] += q * log_r * log_r / 2
            sums["k3"] += q * max(-10.0, min(10.0, math.exp(log_r) - 1 - log_r))
        sums["truncated"] += 1 - z
    d = t.bias.to_dict()
    n = len(positions)
    assert d["positions"] == n and d["pure"] is False and d["reference"] is True
    assert math.isclose(d["kl"], sums["kl"] / n, rel_tol=1e-6)
    for k in ("k1", "k2", "k3"):
        assert math.isclose(d[f"expected_{k}"], sums[k] / n, rel_tol=1e-6)
        assert math.isclose(d[f"bias_{k}"], (sums[k] - sums["kl"]) / n, rel_tol=1e-6, abs_tol=1e-12)
    assert math.isclose(d["truncated_mass"], sums["truncated"] / n, rel_tol=1e-6) and d["truncated_mass"] > 0.01
    best = min(("k1", "k2", "k3"), key=lambda k: abs(sums[k] - sums["kl"]))
    assert d["recommended"] == best


def test_sampler_from_the_log_and_from_the_command_line(tmp_path, qwen3, policy):
    folder, model = policy
    _m, _ctx, played = qwen3
    rows = [r for r, _ in records(played[:3], "correct", model)]
    for r in rows:
        r["sampling"] = {"temperature": 1.0, "top_k": -1, "top_p": 0.9, "max_tokens": 512, "n": 1}  # vLLM's names
    _res, doc = replay_json(tmp_path, rows, "--weights", folder, "--only-tito", "--no-gradient")
    e = doc["models"][0]["replay"]["weights"]["estimators"]
    assert e["source"] == {"log": 3} and e["sampling"] == {"top_p 0.9": 3} and e["pure"] is False
    assert checks(doc)["replay_kl_estimators"]["status"] == "warn" and e["truncated_mass"] > 0
    for r in rows:  # --sampling stands for the records that log no sampler (the log's own wins: RW-1)
        r.pop("sampling")
    _res, doc = replay_json(tmp_path, rows, "--weights", folder, "--only-tito", "--no-gradient", "--sampling", "{}")
    e = doc["models"][0]["replay"]["weights"]["estimators"]
    assert e["source"] == {"--sampling": 3} and e["pure"] is True and e["recommended"] == "k3"
    assert e["truncated_mass"] < 1e-12 and checks(doc)["replay_kl_estimators"]["status"] == "pass"


# -- item 2: what cannot be built is named, never passed ------------------------------------------------------


def test_episodes_without_a_reference_context_are_named_not_passed(tmp_path, qwen3, policy):
    folder, model = policy
    _m, _ctx, played = qwen3
    rows = [r for r, _ in records(played[:4], "correct", model)]
    bare = [{k: r[k] for k in ("id", "turns", "input_ids", "loss_mask")} for r in rows]
    for r in bare:
        for turn in r["turns"]:
            turn.pop("prompt_ids")
    _res, doc = replay_json(tmp_path, bare, "--weights", folder)
    c = checks(doc)
    assert c["replay_gradient"]["status"] == "not_applicable" and NO_CONTEXT in c["replay_gradient"]["summary"]
    assert c["replay_numeric_drift"]["status"] == "not_applicable"
    _res, doc = replay_json(tmp_path, rows[:2] + bare[2:], "--weights", folder, "--only-tito")
    g = checks(doc)["replay_gradient"]
    assert g["status"] == "warn" and g["data"]["compared"] == 2 and g["data"]["not_compared"] == {NO_CONTEXT: 2}
    assert any("2 episode(s) not compared" in f["message"] for f in g["findings"])


# -- item 5: cost and scale ---------------------------------------------------------------------------------


def test_a_padded_batch_gives_the_log_probs_of_one_sequence_at_a_time(qwen3, policy):
    _folder, model = policy
    _m, _ctx, played = qwen3
    vmap = VocabMap.full(VOCAB)
    rows = [Row(p.traj.input_ids, [j for a, b in p.traj.sampled_spans() for j in range(a, b)]) for p in played[:6]]
    assert len({len(r.ids) for r in rows}) > 1  # different lengths: real padding
    assert takes_packed_keep(model, vmap)  # the batched path runs on this transformers
    batched = row_logps(model, vmap, rows, batched=True, max_tokens=1 << 20)
    alone = row_logps(model, vmap, rows, batched=False)
    for b, a in zip(batched, alone, strict=True):
        assert b.shape == a.shape and torch.allclose(b, a, atol=1e-5, rtol=0)


def test_max_episodes_is_a_deterministic_sample_in_log_order(tmp_path, qwen3, policy):
    _folder, model = policy
    _m, ctx, played = qwen3
    log = write_jsonl(tmp_path / "log.jsonl", [r for r, _ in records(played, "correct", model)])
    first = [s.episode.line for s in select_episodes([log], ctx, max_episodes=5)]
    again = [s.episode.line for s in select_episodes([log], ctx, max_episodes=5)]
    assert first == again and first == sorted(first) and len(set(first)) == 5
    assert first != [1, 2, 3, 4, 5]  # a sample of the log, not its head
    assert [s.episode.line for s in select_episodes([log], ctx, max_episodes=0)] == list(range(1, len(played) + 1))


# -- the command line: bad options in one line, exit 2, before the log is read; the JSON schema ---------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ref", "x"], "--ref need(s) --weights"),
        (["--weights", "x", "--sampling", "{top_k: 2}"], "--sampling: not JSON"),
        (["--weights", "x", "--sampling", '{"min_p": 0.1}'], "min_p=0.1 changes the distribution"),
        (["--weights", "x", "--device", "tpu"], "--device must be auto, cpu, cuda or cuda:N"),
        (["--weights", "/no/such/folder"], "/no/such/folder: cannot load weights"),
    ],
)
def test_bad_weights_options_are_one_line_exit_2(tmp_path, args, message):
    log = write_jsonl(tmp_path / "log.jsonl", [{"turns": [[1]], "input_ids": [1], "loss_mask": [1]}])
    res = CliRunner().invoke(app, ["replay", str(log), "-m", str(snapshot(QWEN3)), "-w", "1", "-q", *args])
    assert res.exit_code == 2 and message in res.output, res.output
    assert "Traceback" not in res.output


def test_weights_report_validates_against_the_schema(tmp_path, qwen3, policy):
    jsonschema = pytest.importorskip("jsonschema")
    from tests.formats.test_json_schema import SCHEMA

    folder, model = policy
    _m, _ctx, played = qwen3
    rows = [r for r, _ in records(played[:4], "naive_retokenize", model)]
    _res, doc = replay_json(tmp_path, rows, "--weights", folder, "--ref", folder, "--sampling", '{"top_k": 5}')
    jsonschema.validate(doc, SCHEMA)
    assert set(doc["models"][0]["replay"]["weights"]) >= {"attribution", "gradient", "estimators", "episodes"}


def test_a_buffer_the_template_cannot_rebuild_is_named_not_passed(tmp_path, qwen3, policy):
    """No prompt_ids and messages the template refuses (no user message): the episode's reference buffer cannot be
    built, so it is neither attributed nor compared, and both checks say which episode and why."""
    folder, model = policy
    _m, _ctx, played = qwen3
    rows = [r for r, _ in records(played[:3], "correct", model, prompts=False)]
    rows[2]["messages"] = [m for m in rows[2]["messages"] if m["role"] != "user"]
    _res, doc = replay_json(tmp_path, rows, "--weights", folder, "--only-tito")
    c = checks(doc)
    g, drift = c["replay_gradient"], c["replay_numeric_drift"]
    assert g["status"] == "warn" and g["data"]["compared"] == 2
    (why,) = g["data"]["not_compared"]
    assert why.startswith("reference buffer not rebuilt") and g["data"]["not_compared"][why] == 1
    assert any("line 3" in f["message"] and "not compared" in f["message"] for f in g["findings"])
    w = doc["models"][0]["replay"]["weights"]
    assert w["episodes"]["not_attributed"] == {why: 1} and w["attribution"]["episodes"] == 2
    assert "not attributed: 1 reference buffer not rebuilt" in drift["summary"]


def test_weights_are_loaded_once_for_every_chunk_of_episodes(tmp_path, monkeypatch, qwen3, policy):
    """One load of --weights and one of --ref for the whole log, however many chunks of episodes run."""
    import tito_audit.policy.model as rl_model
    import tito_audit.replay.weights.run as weights_run

    folder, model = policy
    _m, _ctx, played = qwen3
    rows = [r for r, _ in records(played[:6], "correct", model)]
    loads: list[str] = []
    real = rl_model.load_weights

    def counted(path, *a, **kw):
        loads.append(path)
        return real(path, *a, **kw)

    monkeypatch.setattr(rl_model, "load_weights", counted)
    monkeypatch.setattr(weights_run, "CHUNK", 2)  # three chunks of episodes
    res, doc = replay_json(tmp_path, rows, "--weights", folder, "--ref", folder, "--sampling", "{}", "--only-tito")
    assert res.exit_code == 0, res.output
    assert loads == [folder, folder]
    w = doc["models"][0]["replay"]["weights"]
    assert w["episodes"]["run"] == 6 and w["gradient"]["compared"] == 6 and w["estimators"]["positions"] > 0
