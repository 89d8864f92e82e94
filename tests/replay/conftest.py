"""What the replay tests share: the Qwen2.5 CLI run of ``tito-audit replay`` and its JSON report, and a log's
episode written the way vLLM's ``RequestOutput`` objects serialize."""

from __future__ import annotations

import json

from tests.conftest import invoke

QWEN = "Qwen/Qwen2.5-7B-Instruct"


def cli(*args):
    """``tito-audit replay ARGS -m Qwen2.5 -w 1`` in this process; an exception other than the exit is a failure."""
    res = invoke("replay", *map(str, args), "-m", QWEN, "-w", "1")
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res


def report_of(res):
    """The JSON report at the start of stdout (stderr lines may follow in a mixed capture)."""
    return json.JSONDecoder().raw_decode(res.stdout[res.stdout.index("{") :])[0]["models"][0]


def vllm_record(p, with_trainer: bool):
    """One episode as the list of vLLM RequestOutputs of its turns (attribute names of vllm/outputs.py)."""
    r = p.renderer
    requests = []
    for (a, _), ids, lps in zip(p.traj.sampled_spans(), p.turns, p.logprobs, strict=True):
        requests.append(
            {
                "request_id": f"{p.scenario.id}-{len(requests)}",
                "prompt_token_ids": p.traj.input_ids[:a],
                "outputs": [
                    {
                        "index": 0,
                        "text": r.decode(ids),
                        "token_ids": ids,
                        "cumulative_logprob": sum(lps),
                        "logprobs": [
                            {str(t): {"logprob": lp, "rank": 1, "decoded_token": r.decode([t])}}
                            for t, lp in zip(ids, lps, strict=True)
                        ],
                        "finish_reason": "stop",
                    }
                ],
                "finished": True,
            }
        )
    if not with_trainer:
        return requests
    return {"requests": requests, "input_ids": p.traj.input_ids, "loss_mask": p.traj.loss_mask}
