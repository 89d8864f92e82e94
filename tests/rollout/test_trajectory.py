"""The token buffer as a library: stop handling, truncation, refusals, preflight, any tokenizer, no torch."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT, snapshot
from tito_audit import AppendRefused, BridgeError, Trajectory, TruncatedCompletion
from tito_audit.audit.simulation import derive_turn
from tito_audit.rollout.probes import TOOLS

CALL = {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
USER = {"role": "user", "content": "What is the weather in Paris?"}
ASSISTANT_CALL = {"role": "assistant", "content": "", "tool_calls": [CALL]}
TOOL = {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "Sunny, 21 C."}


def _sampled(traj: Trajectory, message: dict) -> list[int]:
    """What a model trained on the template samples for ``message`` (the audit simulator's derivation)."""
    history = [*traj.messages, message]
    return derive_turn(traj.renderer, history, len(history) - 1, traj.tools, traj.stop_ids).sampled_ids


def _state(traj: Trajectory) -> tuple:
    return (list(traj.input_ids), list(traj.loss_mask), list(traj.logprobs), json.dumps(traj.messages), traj.truncated)


@pytest.fixture(scope="module")
def qwen25(loaded):
    return loaded("Qwen/Qwen2.5-7B-Instruct")


@pytest.fixture(scope="module")
def qwen3(loaded):
    return loaded("Qwen/Qwen3-0.6B")


def test_tool_episode_buffer_is_what_was_sampled_and_appended(qwen25) -> None:
    traj = Trajectory.from_model(qwen25, tools=list(TOOLS))
    prompt = traj.start([USER])
    assert prompt == traj.renderer.render_ids([USER], tools=list(TOOLS), add_generation_prompt=True)
    ids = _sampled(traj, ASSISTANT_CALL)
    lps = [-0.5 - i / 100 for i in range(len(ids))]
    assert traj.append_sampled(ids, logprobs=lps, message=ASSISTANT_CALL) == len(ids)
    delta = traj.append_messages([TOOL])
    full = traj.renderer.render_ids([USER, ASSISTANT_CALL, TOOL], tools=list(TOOLS), add_generation_prompt=True)
    assert delta and full[-len(delta) :] == delta  # the delta is the template's own tail for the tool turn
    assert traj.input_ids == prompt + ids + delta
    assert traj.loss_mask == [0] * len(prompt) + [1] * len(ids) + [0] * len(delta)
    assert traj.logprobs == [None] * len(prompt) + lps + [None] * len(delta)
    assert traj.sampled_spans() == [(len(prompt), len(prompt) + len(ids))]
    assert traj.prompt_length == len(prompt) and len(traj) == len(traj.input_ids)
    out = traj.to_dict(logprob_fill=0.0)
    assert len(out["input_ids"]) == len(out["loss_mask"]) == len(out["logprobs"])
    assert all(isinstance(x, float) for x in out["logprobs"]) and out["logprobs"][len(prompt)] == lps[0]


def test_ids_after_the_stop_token_raise_or_are_dropped(qwen25) -> None:
    strict = Trajectory.from_model(qwen25)
    strict.start([USER])
    ids = _sampled(strict, {"role": "assistant", "content": "It is sunny."})
    junk = strict.renderer.encode(" and more")
    with pytest.raises(ValueError, match="after the stop token"):
        strict.append_sampled([*ids, *junk], logprobs=[-1.0] * (len(ids) + len(junk)))
    assert strict.segments[-1].kind == "prompt"  # nothing appended

    lenient = Trajectory.from_model(qwen25, after_stop="drop")
    prompt = lenient.start([USER])
    lps = [-float(i) for i in range(len(ids) + len(junk))]
    assert lenient.append_sampled([*ids, *junk], logprobs=lps) == len(ids)
    assert lenient.input_ids == prompt + ids and lenient.logprobs[len(prompt) :] == lps[: len(ids)]
    assert not lenient.truncated
    assert lenient.messages[-1] == {"role": "assistant", "content": "It is sunny."}  # decoded without the stop


def test_truncated_completion_refuses_or_closes_the_turn_untrained(qwen25) -> None:
    answer = {"role": "assistant", "content": "The weather in Paris is sunny and"}
    refuse = Trajectory.from_model(qwen25)
    refuse.start([USER])
    cut = _sampled(refuse, answer)[:-1]  # hit the length limit before the stop token
    refuse.append_sampled(cut)
    assert refuse.truncated
    before = _state(refuse)
    with pytest.raises(TruncatedCompletion) as info:
        refuse.append_messages([{"role": "user", "content": "Go on."}])
    assert isinstance(info.value, AppendRefused) and "stop token" in info.value.reason
    assert _state(refuse) == before

    mask = Trajectory.from_model(qwen25, on_truncated="mask")
    prompt = mask.start([USER])
    mask.append_sampled(cut[:3])  # streamed in two chunks: the second continues the same turn
    mask.append_sampled(cut[3:], message=answer)
    assert len(mask.messages) == 2 and mask.messages[-1] == answer
    appended = mask.append_messages([{"role": "user", "content": "Go on."}])
    closed = [*mask.messages[:-1]]
    history = mask.renderer.render_ids(closed, add_generation_prompt=False)
    turn_end = [s for s in mask.segments if s.kind == "turn_end"]
    assert len(turn_end) == 1 and mask.input_ids[turn_end[0].start : turn_end[0].end] == [mask.stop_ids[0]]
    assert mask.stop_ids[0] in history[len(prompt) :]  # the template closes the turn with that very token
    assert mask.input_ids == prompt + cut + appended and appended[0] == mask.stop_ids[0]
    assert mask.loss_mask == [0] * len(prompt) + [1] * len(cut) + [0] * len(appended)
    assert not mask.truncated


def test_refusal_names_the_first_divergent_token_and_leaves_the_buffer_alone(qwen3) -> None:
    traj = Trajectory.from_model(qwen3, tools=list(TOOLS), chat_template_kwargs={"enable_thinking": False})
    traj.start([USER])
    traj.append_sampled(_sampled(traj, ASSISTANT_CALL), message=ASSISTANT_CALL)
    before = _state(traj)
    with pytest.raises(BridgeError) as info:
        traj.append_messages([TOOL])
    exc = info.value
    assert _state(traj) == before
    i = exc.index
    assert exc.before[:i] == exc.after[:i] and exc.before[i] != exc.after[i]
    first = traj.renderer.decode([exc.before[i]], skip_special_tokens=False)
    assert f"at token {i} " in exc.reason and repr(first) in exc.reason and f"id {exc.before[i]}" in exc.reason
    # What the template did: the re-render lacks the history's empty think block, and the reason says so.
    dropped = traj.renderer.decode(exc.removed, skip_special_tokens=False)
    assert "drops" in exc.reason and not exc.inserted and "<think>" in dropped and "</think>" in dropped
    assert exc.after[i : i + 5] == exc.before[i + len(exc.removed) : i + len(exc.removed) + 5]


def test_append_refused_keeps_going_with_the_tokens_naive_code_would_append(qwen3) -> None:
    """After a refusal, ``append_refused`` appends what the template's full render has after the sampled turn:
    the buffer is then the full render's ids with the sampled turn's rewritten history, untrained."""
    traj = Trajectory.from_model(qwen3, tools=list(TOOLS), chat_template_kwargs={"enable_thinking": False})
    traj.start([USER])
    traj.append_sampled(_sampled(traj, ASSISTANT_CALL), message=ASSISTANT_CALL)
    kept = len(traj.input_ids)
    with pytest.raises(BridgeError) as info:
        traj.append_messages([TOOL])
    tool = dict(TOOL)
    appended = traj.append_refused([tool], info.value)
    tool["content"] = "changed by the caller later"
    assert appended == info.value.forced_ids and appended
    assert traj.input_ids[kept:] == appended and traj.loss_mask[kept:] == [0] * len(appended)
    assert traj.segments[-1].kind == "bridge" and traj.messages[-1] == TOOL  # a copy, as append_messages keeps
    full = traj.renderer.render_ids([USER, ASSISTANT_CALL, TOOL], tools=traj.tools, add_generation_prompt=True)
    assert full[len(full) - len(appended) :] == appended  # the tail of the render that rewrote the history
    assert traj.input_ids != full  # ... while the buffer still holds the history as it was sampled


def test_preflight_agrees_with_the_audit(qwen3, report) -> None:
    traj = Trajectory.from_model(qwen3)
    modes = [{}, {"enable_thinking": True}, {"enable_thinking": False}]
    checks = traj.preflight(modes)
    audit = report("Qwen/Qwen3-0.6B")
    matrix = next(c for c in audit.checks if c.id == "append_matrix").data["matrix"]
    for c in (c for c in checks if c.probe == "append_matrix"):
        mode = ",".join(f"{k}={v}" for k, v in c.mode.items()) or "default"
        cell = f"{c.role} after {c.after.replace('tool call', 'call')}"
        assert matrix[mode][cell] == {True: "pass", False: "fail", None: "n/a"}[c.ok], (mode, cell, c.reason)
    tool_probe = [c for c in checks if c.probe == "tool_append_prefix"]
    tool_check = next(c for c in audit.checks if c.id == "tool_append_prefix")
    assert all(c.ok is False for c in tool_probe) and tool_check.status == "fail"
    assert all("drops" in c.reason for c in checks if c.ok is False)


def test_any_hf_tokenizer_with_template_kwargs(qwen3) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(snapshot("Qwen/Qwen3-0.6B")))  # not a tito_audit LoadedModel
    off = Trajectory.from_tokenizer(tok, tools=list(TOOLS), chat_template_kwargs={"enable_thinking": False})
    on = Trajectory.from_tokenizer(tok, tools=list(TOOLS), chat_template_kwargs={"enable_thinking": True})
    assert off.stop_ids == Trajectory.from_model(qwen3).stop_ids
    ids_off, ids_on = off.start([USER]), on.start([USER])
    assert ids_off != ids_on and "</think>" in tok.decode(ids_off[len(ids_on) :])  # the switch reached the template
    # Each mode's appends succeed or refuse exactly as that mode's preflight says.
    for traj in (off, on):
        expected = {(c.role, c.after): c.ok for c in traj.preflight() if c.probe == "append_matrix"}
        answer = {"role": "assistant", "content": "Sunny.", "reasoning_content": "Easy."}
        sampled = _sampled(traj, answer)
        traj.append_sampled(sampled, message=answer)
        try:
            delta = traj.append_messages([{"role": "user", "content": "Thanks!"}])
            assert expected["user", "answer"] is True
            assert traj.input_ids[-len(sampled) - len(delta) :] == sampled + delta
        except BridgeError as exc:
            assert expected["user", "answer"] is False, exc.reason


def test_misuse_is_a_value_error(qwen25) -> None:
    traj = Trajectory.from_model(qwen25)
    with pytest.raises(ValueError, match="start"):
        traj.append_sampled([1, 2])
    traj.start([USER])
    with pytest.raises(ValueError, match="logprobs"):
        traj.append_sampled([1, 2], logprobs=[0.0])
    answer = {"role": "assistant", "content": "Sunny."}
    traj.append_sampled(_sampled(traj, answer), message=answer)
    with pytest.raises(ValueError, match="closed"):
        traj.append_sampled(_sampled(traj, answer))
    with pytest.raises(ValueError, match="append_sampled"):
        traj.append_messages([{"role": "assistant", "content": "injected"}])
    traj.append_messages([{"role": "user", "content": "Ok"}], add_generation_prompt=False)
    with pytest.raises(ValueError, match="closed"):
        traj.append_sampled(_sampled(traj, answer))


@pytest.mark.parametrize(
    ("ids", "logprobs", "words"),
    [
        ([9707.7, 151645], None, "found float 9707.7"),  # int() would have put token 9707 in the buffer
        ([True, 151645], None, "found bool True"),
        ([-1, 151645], None, "a negative id -1"),
        ([9707, 151645], [float("nan"), 0.0], "finite and at most 0"),
        ([9707, 151645], [-0.5, 5.0], "finite and at most 0"),
        ([9707, 151645], [-0.5, float("inf")], "finite and at most 0"),
    ],
)
def test_a_sampled_id_or_log_prob_no_engine_gives_is_refused(qwen25, ids, logprobs, words) -> None:
    """Red team 49: a float id was truncated and a bool became id 1, and NaN or positive log-probs were kept: the
    buffer held tokens nobody sampled, which a loop that does not log trains on. Refused by the rules a log is
    read by (``replay.schema``); a float without a fraction, numpy ids and rounding above 0 are still read."""
    traj = Trajectory.from_model(qwen25)
    traj.start([USER])
    with pytest.raises(ValueError, match=words):
        traj.append_sampled(ids, logprobs=logprobs)
    before = list(traj.input_ids)
    np = pytest.importorskip("numpy")
    kept = traj.append_sampled(np.array([9707, 151645]), logprobs=[-0.5, 0.00005])
    assert kept == 2 and traj.input_ids == [*before, 9707, 151645]  # the refused call appended nothing
    other = Trajectory.from_model(qwen25)
    other.start([USER])
    other.append_sampled([9707.0, 151645])
    assert other.input_ids == traj.input_ids


def test_an_empty_append_with_the_generation_prompt_lets_the_model_take_another_turn(qwen25) -> None:
    """Two assistant messages in a row (a loop that lets the model go on after it stopped, or keeps a text and a
    call apart): ``append_messages([])`` appends the generation prompt alone, and the buffer is the render of both
    turns on a template that writes each turn the same whether another follows; without the generation prompt an
    empty append adds nothing and is refused."""
    traj = Trajectory.from_model(qwen25, tools=list(TOOLS))
    prompt = traj.start([USER])
    said = {"role": "assistant", "content": "Let me check."}
    first = _sampled(traj, said)
    traj.append_sampled(first, message=said)
    with pytest.raises(ValueError, match="generation prompt"):
        traj.append_messages([], add_generation_prompt=False)
    opener = traj.append_messages([])
    assert traj.renderer.decode(opener, skip_special_tokens=False) == "\n<|im_start|>assistant\n"
    second = _sampled(traj, ASSISTANT_CALL)
    traj.append_sampled(second, message=ASSISTANT_CALL)
    rendered = traj.renderer.render_ids([USER, said, ASSISTANT_CALL], tools=list(TOOLS))
    assert traj.input_ids == prompt + first + opener + second == rendered[: len(traj.input_ids)]
    assert traj.sampled_spans() == [
        (len(prompt), len(prompt) + len(first)),
        (len(prompt) + len(first) + len(opener), len(traj.input_ids)),
    ]


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_rollout_api_needs_no_torch() -> None:
    done = _run("import sys\nfrom tito_audit import Trajectory, BridgeError\nprint('torch' in sys.modules)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
    # A whole episode with torch made unimportable.
    code = f"""
import sys
sys.modules["torch"] = None
from transformers import AutoTokenizer
from tito_audit import Trajectory
tok = AutoTokenizer.from_pretrained({str(snapshot("Qwen/Qwen2.5-7B-Instruct"))!r})
traj = Trajectory.from_tokenizer(tok)
prompt = traj.start([{{"role": "user", "content": "Hi"}}])
sampled = tok.encode("Hello!") + [traj.stop_ids[0]]
traj.append_sampled(sampled, logprobs=[-0.1] * len(sampled))
delta = traj.append_messages([{{"role": "user", "content": "Bye"}}])
assert traj.input_ids == prompt + sampled + delta and sum(traj.loss_mask) == len(sampled)
print("ok", "torch" in sys.modules and sys.modules["torch"] is not None)
"""
    done = _run(code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["ok", "False"]


def test_example_script_shows_buffer_exact_and_naive_drift() -> None:
    done = subprocess.run(
        [sys.executable, "examples/rollout_with_buffer.py"], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "buffer ids == prompt + sampled + appended deltas: True" in out
    assert re.search(r"trained ids (\d+) == sampled ids \1: True", out)
    assert "naive re-render + re-tokenize == buffer: False" in out
    split = re.search(r"engine sampled '(.+?)' \(id \d+\) as \['(.+?)', '(.+?)'\]", out)
    assert split and split.group(1) == split.group(2) + split.group(3)
    first = re.search(
        r"first divergent token: index \d+ \(a sampled \(trained\) token\): buffer '(.+?)'.*naive '(.+?)'", out
    )
    assert first and first.group(1) == split.group(2) and first.group(2) == split.group(1)
    assert "(same text, other ids): True" in out


def test_library_renders_never_lower_the_process_address_space_limit(qwen25, monkeypatch) -> None:
    """A trainer's other threads share RLIMIT_AS: the library keeps time/size bounds, not the audit's memory cap."""
    import resource

    calls: list[tuple] = []
    real = resource.setrlimit
    monkeypatch.setattr(resource, "setrlimit", lambda *a: calls.append(a) or real(*a))
    traj = Trajectory.from_model(qwen25, tools=list(TOOLS))
    traj.start([USER])
    traj.append_sampled(_sampled(traj, ASSISTANT_CALL), message=ASSISTANT_CALL)
    traj.append_messages([TOOL])
    assert calls == []
    assert traj.renderer.limits.seconds > 0 and traj.renderer.limits.max_chars > 0


def test_the_buffer_keeps_its_own_copy_of_every_message(qwen25) -> None:
    """What the caller changes afterwards never reaches the buffer's messages; values keep their exact types
    (True stays apart from 1, tuples from lists), and values beyond plain data (a date) are copied too."""
    import datetime as dt

    traj = Trajectory.from_tokenizer(qwen25.tokenizer, tools=list(TOOLS))
    user = {"role": "user", "content": "Weather?", "meta": {"flags": [True, 1, 1.0], "pair": (1, 2)}}
    when = {"role": "user", "content": "Weather?", "sent": dt.date(2026, 1, 1)}
    traj.start([user])
    call = {**ASSISTANT_CALL, "tool_calls": [json.loads(json.dumps(CALL))]}
    traj.append_sampled(_sampled(traj, call), message=call)
    tool = dict(TOOL)
    traj.append_messages([tool])
    user["meta"]["flags"].append("changed")
    call["tool_calls"][0]["function"]["arguments"]["city"] = "Oslo"
    tool["content"] = "changed"
    stored = traj.messages
    assert stored[0] == {"role": "user", "content": "Weather?", "meta": {"flags": [True, 1, 1.0], "pair": (1, 2)}}
    assert [type(v) for v in stored[0]["meta"]["flags"]] == [bool, int, float] and type(
        stored[0]["meta"]["pair"]
    ) is tuple
    assert (
        stored[1]["tool_calls"][0]["function"]["arguments"]["city"] == "Paris"
        and stored[2]["content"] == TOOL["content"]
    )
    other = Trajectory.from_tokenizer(qwen25.tokenizer)
    other.start([when])
    assert other.messages[0] == when and other.messages[0] is not when


@pytest.mark.parametrize("spec", ["Qwen/Qwen3-0.6B", "meta-llama/Llama-3.2-3B-Instruct", "openai/gpt-oss-20b"])
def test_a_simulated_turn_from_the_prefix_renders_is_the_turn_rendered_anew(loaded, spec) -> None:
    """``simulate`` hands ``derive_turn`` the prefix renders it made while adapting the conversation; every turn
    of every full scenario is the turn a fresh renderer derives without them (a prompt after an assistant turn,
    rendered without a generation prompt there, is rendered anew)."""
    from tito_audit.audit.simulation import simulate
    from tito_audit.rendering import Renderer
    from tito_audit.rollout import stop_token_ids
    from tito_audit.scenarios import build_scenarios

    model = loaded(spec)
    renderer = Renderer(model.tokenizer, model.chat_template)
    stops = list(stop_token_ids(model.tokenizer, renderer))
    compared = 0
    for scenario in build_scenarios():
        sim = simulate(renderer, scenario, stops)
        if not sim.ok:
            continue
        fresh = Renderer(model.tokenizer, model.chat_template).with_kwargs(**scenario.kwargs)
        for turn in sim.turns:
            again = derive_turn(fresh, sim.messages, turn.index, list(scenario.tools), stops)
            assert again == turn, (scenario.id, turn.index)
            compared += 1
    assert compared > 50


def test_a_turn_after_an_assistant_turn_is_prompted_with_a_generation_prompt(qwen3) -> None:
    """The prefix render that ends with an assistant turn has no generation prompt; the next assistant turn's
    prompt needs one, so it is not taken from the prefix renders."""
    from tito_audit.audit.simulation import _first_render_error
    from tito_audit.rendering import Renderer

    history = [USER, {"role": "assistant", "content": "Let me check."}, {"role": "assistant", "content": "Sunny."}]
    renderer = Renderer(qwen3.tokenizer, qwen3.chat_template)
    prefixes: list[str] = []
    assert _first_render_error(renderer, history, None, prefixes) is None and len(prefixes) == 3
    stops = [qwen3.tokenizer.convert_tokens_to_ids("<|im_end|>")]
    with_prefixes = derive_turn(renderer, history, 2, None, stops, prefixes=prefixes)
    fresh = derive_turn(Renderer(qwen3.tokenizer, qwen3.chat_template), history, 2, None, stops)
    assert with_prefixes == fresh and with_prefixes.prompt_text.endswith("<|im_start|>assistant\n")


def test_the_buffer_and_the_replay_reader_accept_and_refuse_the_same_ids():
    """One check of ids and log-probs (``rollout.tokens``) for the buffer and the replay reader: they differed on
    numpy integers in a list (the buffer read them, replay called the record malformed) and in their wording."""
    np = pytest.importorskip("numpy")
    from tito_audit.replay.schema import RecordError, episode_from_native
    from tito_audit.rollout.tokens import sampled_ids, sampled_logprobs

    cases = [
        ([np.int64(9707), 151645], [np.float32(-0.5), 0.0]),  # numpy scalars in a list
        (np.array([9707, 151645]), np.array([-0.5, 0.0])),
        ([9707.0, 151645], [-0.5, 0]),  # a float without a fraction is its integer
        ([9707.7, 151645], None),
        ([True, 151645], None),
        ([-1, 151645], None),
        ("9707", None),
        ([9707, 151645], [float("nan"), 0.0]),
        ([9707, 151645], ["-0.5", 0.0]),
    ]
    for ids, logprobs in cases:
        try:
            buffered: object = (sampled_ids(ids), sampled_logprobs(logprobs) if logprobs is not None else None)
        except ValueError as exc:
            buffered = str(exc)
        turn = {"ids": ids, **({"logprobs": logprobs} if logprobs is not None else {})}
        try:
            episode = episode_from_native({"turns": [turn], "input_ids": [1, 2]})
            t = episode.turns[0]
            read: object = (list(t.ids), list(t.logprobs) if t.logprobs is not None else None)
        except RecordError as exc:
            read = str(exc).replace("turns[0].ids", "sampled ids").replace("turns[0].logprobs", "logprobs")
        assert read == buffered, (ids, logprobs)
