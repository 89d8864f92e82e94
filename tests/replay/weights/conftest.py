"""What the ``replay --weights`` tests share: a random Qwen3 2x32 policy over Qwen3-0.6B's full vocabulary (built
from a config, saved as a user's folder), the audit's played scenarios on its tokenizer, the engine's log-probs
from that policy in a given precision, and one CLI run of ``replay --weights`` with its JSON report."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.conftest import invoke, snapshot, tiny_qwen3_config, write_jsonl
from tito_audit.policy.model import VocabMap
from tito_audit.replay.schema import episode_from_native
from tito_audit.replay.weights import Policy, analyze_pairs, build_pair, tito_only, with_settings
from tito_audit.testing.synthetic import log_episode, with_engine_prompts

QWEN3 = "Qwen/Qwen3-0.6B"
VOCAB = 151936


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    """(folder, the same model in float32)."""
    folder = tmp_path_factory.mktemp("policy")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_qwen3_config(VOCAB))
    model.save_pretrained(folder)
    return str(folder), model.eval()


@pytest.fixture(scope="module")
def qwen3(plays):
    model, ctx, played = plays(QWEN3, 0.3, 3)
    return model, ctx, played[:12]


_ENGINE: dict[tuple[int, torch.dtype], list[list[float]]] = {}
_COPIES: dict[torch.dtype, torch.nn.Module] = {}


def engine_logprobs(model, ids, spans, dtype=torch.float32):
    """What an engine running ``model`` in ``dtype`` logs for each sampled id: log p under the full softmax."""
    key = (hash((tuple(ids), tuple(spans))), dtype)
    if key not in _ENGINE:
        m = _COPIES.setdefault(dtype, copy.deepcopy(model).to(dtype))
        rows = [j - 1 for a, b in spans for j in range(a, b)]
        with torch.no_grad():
            logits = m(input_ids=torch.tensor([ids])).logits[0]
            lp = torch.log_softmax(logits[rows].float(), -1)
        got = iter(float(lp[k, ids[r + 1]]) for k, r in enumerate(rows))
        _ENGINE[key] = [[next(got) for _ in range(a, b)] for a, b in spans]
    return _ENGINE[key]


def records(played, loop, model, dtype=torch.float32, prompts=True):
    """(record, injected truth) per episode, the engine's log-probs from ``model`` in ``dtype``."""
    out = []
    for n, p in enumerate(played):
        logged = log_episode(p, loop, f"ep{n}")
        rec = with_engine_prompts(logged.record, p) if prompts else copy.deepcopy(logged.record)
        lps = engine_logprobs(model, p.traj.input_ids, p.traj.sampled_spans(), dtype)
        for turn, lp in zip(rec["turns"], lps, strict=True):
            turn["logprobs"] = lp
        out.append((rec, logged.truth))
    return out


def run_api(recs, ctx, model, settings=None, ref=None, **kw):
    pairs = [with_settings(build_pair(episode_from_native(r, n + 1), tito_only(ctx)), settings, None)
             for n, (r, _t) in enumerate(recs)]  # fmt: skip
    return analyze_pairs(pairs, Policy.of(model, VocabMap.full(VOCAB, valid=151669), ref, **kw), keep=True)


def replay_json(tmp_path, rows, *args):
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    out = tmp_path / "report.json"
    res = invoke("replay", str(log), "-m", str(snapshot(QWEN3)), "-w", "1", "-q", "-f", "json", "-o", str(out), *args)
    doc = json.loads(out.read_text()) if out.is_file() else None
    return res, doc


def checks(doc):
    return {c["id"]: c for c in doc["models"][0]["checks"]}
