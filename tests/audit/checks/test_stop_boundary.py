"""Stops and turns read per kind of turn, from the template's renders (red-team findings B1-B7 of the `rl` red
team): a control word written inside one assistant message ends no turn, a stop inside the turn is named, the turn
starts after the history a rewriting template re-renders, shipped metadata must cover every kind of turn end."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CORPUS, needs_corpus, snapshot
from tests.conftest import DATA as TEST_DATA
from tito_audit import AuditOptions, load
from tito_audit.audit.checks import REGISTRY, run_check
from tito_audit.audit.context import AuditContext
from tito_audit.audit.simulation import Simulation, simulate
from tito_audit.rendering.renderer import Renderer
from tito_audit.rollout.stop import stop_token_ids
from tito_audit.rollout.turn_roles import turn_roles
from tito_audit.scenarios.catalog import build_scenarios

DATA = TEST_DATA / "stops"
QUICK = AuditOptions(scenarios="quick")
QWEN25, QWEN3 = "Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen3-0.6B"


def template(name: str) -> str:
    return (DATA / f"{name}.jinja").read_text(encoding="utf-8")


def stop_names(renderer: Renderer, generation_eos_ids: tuple[int, ...] = ()) -> list[str]:
    tok = renderer.tokenizer
    return tok.convert_ids_to_tokens(list(stop_token_ids(tok, renderer, generation_eos_ids)))


def played(renderer: Renderer, scenario: str) -> Simulation:
    [sc] = [s for s in build_scenarios([]) if s.id == scenario]
    sim = simulate(renderer, sc, stop_token_ids(renderer.tokenizer, renderer))
    assert sim.ok, sim.error
    return sim


def sampled(renderer: Renderer, sim: Simulation, index: int) -> str:
    [turn] = [t for t in sim.turns if t.index == index]
    return renderer.decode(turn.sampled_ids, skip_special_tokens=False)


def model_folder(tmp_path: Path, name: str, eos: str | None = None, generation: Any = None) -> str:
    """A model folder: Qwen2.5's tokenizer, ``name``'s template, an eos override, a generation_config."""
    source = snapshot(QWEN25)
    shutil.copy(source / "tokenizer.json", tmp_path / "tokenizer.json")
    config = json.loads((source / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    if eos is not None:
        config["eos_token"] = eos
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    (tmp_path / "chat_template.jinja").write_text(template(name), encoding="utf-8")
    if generation is not None:
        (tmp_path / "generation_config.json").write_text(json.dumps(generation))
    return str(tmp_path)


def test_a_closer_of_each_call_is_no_stop_the_next_opener_ends_call_turns(loaded) -> None:
    """B1: call turns end `</tool_call>\\n` and run into the next opener; `</tool_call>` closes each parallel call,
    so stopping on it cuts the turn after call 1. The call turn's stop is the tool result's opener, and a parallel
    turn is sampled whole."""
    renderer = Renderer(loaded(QWEN25).tokenizer, template("call_no_closer"))
    stops = stop_names(renderer)
    assert "</tool_call>" not in stops and {"<|im_end|>", "<|im_start|>"} <= set(stops)
    sim = played(renderer, "parallel_calls/plain")
    text = sampled(renderer, sim, 1)
    assert "get_weather" in text and "search_docs" in text and text.endswith("<|im_start|>")
    assert all(not t.trailing_text.strip() and not t.cut_text for t in sim.turns)


def test_a_message_written_as_several_turns_is_cut_not_trailing_text(loaded) -> None:
    """B2: the reasoning closed by `<|im_end|>`, then `<|im_start|>assistant` with the calls or the answer: what
    follows the stop is the message's own content, which an engine never samples. It is named (stop_boundary,
    tool_append_prefix: unsafe), never passed off as template text."""
    model = loaded(QWEN3).with_template(template("reasoning_block_closed"), "reasoning_block_closed.jinja")
    renderer = Renderer(model.tokenizer, model.chat_template)
    sim = played(renderer, "reasoning/plain")
    answer = next(t for t in sim.turns if t.index == 3)
    assert "It is sunny in Paris." in answer.cut_text and answer.trailing_text == ""
    ctx = AuditContext(model, AuditOptions())
    boundary = run_check(REGISTRY["stop_boundary"], ctx)
    assert any("inside assistant message 3" in f.message for f in boundary.findings)
    assert not any("It is sunny" in t for t in boundary.data["trailing_after_stop"])
    appends = run_check(REGISTRY["tool_append_prefix"], ctx)
    assert appends.status == "fail" and {f.reason for f in appends.findings} == {"stop_inside_turn"}


def test_gpt_oss_turns_start_after_the_rewritten_history(loaded) -> None:
    """B3 (bundled gpt-oss): the final render drops the earlier call's analysis; the final turn is the analysis and
    answer after the tool result, not a copy of the earlier call with the answer as trailing text."""
    model = loaded("gpt-oss-20b")
    renderer = Renderer(model.tokenizer, model.chat_template)
    sim = played(renderer, "reasoning/plain")
    final = sampled(renderer, sim, 3)
    assert "functions.get_weather" not in final and final.endswith("It is sunny in Paris.<|return|>")
    assert all(not t.trailing_text and not t.cut_text for t in sim.turns)


@needs_corpus
def test_a_message_end_between_channels_is_no_turn_end(loaded) -> None:
    """B3 (unsloth gpt-oss): `<|end|>` ends the analysis message inside a turn (and the answer, in its history
    form); no engine may stop on it: the call turn holds its analysis and its call."""
    text = (CORPUS / "unsloth-gpt-oss-20b.jinja").read_text(encoding="utf-8")
    renderer = Renderer(loaded("gpt-oss-20b").tokenizer, text)
    assert "<|end|>" in turn_roles(renderer).inner and "<|end|>" not in stop_names(renderer)
    call = sampled(renderer, played(renderer, "reasoning/plain"), 1)
    assert "analysis" in call and call.endswith('{"city": "Paris"}<|call|>')


def test_generation_config_must_list_the_turn_end(tmp_path: Path) -> None:
    """B4: a generation_config that lists only the eos `<|endoftext|>` does not make `<|im_end|>` a configured stop:
    stop_boundary still says an engine runs past the turn."""
    model = load(model_folder(tmp_path, "qwen25_chatml", eos="<|endoftext|>", generation={"eos_token_id": 151643}))
    result = run_check(REGISTRY["stop_boundary"], AuditContext(model, QUICK))
    [finding] = [f for f in result.findings if f.scenario == "probe/turn_end"]
    assert "'<|im_end|>'" in finding.message and "generation_config's eos_token_id" in finding.message


def test_generation_config_must_list_every_next_opener(tmp_path: Path) -> None:
    """B4: GLM-like next-opener stops; generation_config lists the user opener, not the tool result's."""
    spec = model_folder(tmp_path, "glm_like", generation={"eos_token_id": [151643, 151648]})
    result = run_check(REGISTRY["stop_boundary"], AuditContext(load(spec), QUICK))
    [finding] = [f for f in result.findings if f.scenario == "probe/turn_end"]
    assert "tool-call turns end at the next turn's opener '<|vision_start|>'" in finding.message


@pytest.mark.parametrize("pair", ["⟪⟫", "⦃⦄", "❮❯"])
def test_a_split_closer_in_any_bracket_pair_closes_turns(loaded, pair: str) -> None:
    """B5: a closer between a mirrored pair of any script, split by the tokenizer, is the turn end (read from the
    Unicode bracket categories, not from a list of pairs)."""
    closer = f"{pair[0]}eot{pair[1]}"
    text = template("closer_guillemet").replace("⟪eot⟫", closer)
    roles = turn_roles(Renderer(loaded(QWEN25).tokenizer, text))
    assert roles.convention == "after_turn" and roles.turn_ends == (closer,)


def test_a_closer_after_a_signature_is_the_turn_end(loaded) -> None:
    """B6: answers end `\\n-- sent by assistant <|im_end|>`: `<|im_end|>` (the eos) closes the turn; no finding
    that an engine stopping on eos runs past it."""
    model = loaded(QWEN25).with_template(template("closer_signature"), "closer_signature.jinja")
    ctx = AuditContext(model, QUICK)
    assert turn_roles(ctx.renderer).convention == "after_turn"
    result = run_check(REGISTRY["stop_boundary"], ctx)
    assert not [f for f in result.findings if f.scenario == "probe/turn_end"], result.findings


def test_answers_closed_and_call_turns_ended_by_the_next_opener(loaded) -> None:
    """B7: answers close with `<|im_end|>` once a message follows, call turns never close: the call turns' stop is
    the next opener, every played turn has its stop rendered, and no history diverges."""
    model = loaded(QWEN25).with_template(template("deferred_answer_no_call_closer"), "deferred.jinja")
    renderer = Renderer(model.tokenizer, model.chat_template)
    assert turn_roles(renderer).convention == "mixed"
    assert {"<|im_end|>", "<|im_start|>"} <= set(stop_names(renderer))
    for scenario in ("single_call/plain", "parallel_calls/plain", "followup_user/plain"):
        sim = played(renderer, scenario)
        assert all(t.stop_rendered for t in sim.turns), scenario
        assert not sim.bridge_errors, (scenario, sim.bridge_errors)


def test_a_turn_after_a_rewritten_tool_result_starts_after_the_generation_prompt() -> None:
    """A tool result written one way when last and another once a turn follows (Hermes-2-Pro's tool_use template
    adds a newline before its end): the history's tail is a turn end the new turn writes too, so the turn starts
    where the generation prompt follows that end once, not at the point of departure (which read the tool result's
    end as a stop inside the assistant turn)."""
    from tito_audit.rollout.turn_start import turn_start

    history = "<u>hi<e><t>result</t><e>"
    full = "<u>hi<e><t>result</t>\n<e><a>call one<e>"
    assert turn_start(history + "<a>", full, lambda: history) == full.index("call one")


def test_a_turn_after_an_assistant_turn_whose_end_history_drops_starts_after_the_generation_prompt() -> None:
    """A template that ends an assistant turn only when no assistant turn follows at once (red team 10's r18): the
    history's tail is that turn end, which the new turn writes too at its own end, with nothing of the generation
    prompt after it; the turn starts after the generation prompt, not past its own end (which read its calls as
    dropped)."""
    from tito_audit.rollout.turn_start import turn_start

    history = "<u>hi<e><a>Let me check.<e>"
    full = "<u>hi<e><a>Let me check.\n<a>call one<e>"
    own = lambda text: "call" in text  # noqa: E731
    assert turn_start(history + "<a>", full, lambda: history, own) == full.index("call one")
    # only template text between the generation prompt and the tail (a template that drops the turn's calls and
    # writes the history's trailer after it): the turn is not started there
    assert turn_start(history + "<a>", full, lambda: history, lambda text: False) == len(full)
    # an earlier result dropped once a new call turn follows (review 11's r3): the generation prompt's opener
    # starts inside the shared prefix (``<s>``), and the tail found is the new turn's own end
    history = "<s>u\nhi<e>\n<s>a\n<c>1</c><e>\n<s>u\n<r>ok</r><e>\n"
    full = "<s>u\nhi<e>\n<s>a\n<c>1</c><e>\n<s>a\n<c>2</c><e>\n"
    assert turn_start(history + "<s>a\n", full, lambda: history, lambda text: "2" in text) == full.index("<c>2")


def test_a_turn_whose_generation_prompt_history_writes_after_another_line_end_starts_after_it() -> None:
    """A template that ends an assistant turn with one more line end once another assistant turn follows at once (red
    team 12's r07): the render parts from the generation prompt inside it, and writes only whitespace before the
    rest of it; the turn starts after that rest, not at the point of departure (where the two line ends are one
    token that spans prompt and turn, and the conversation was not judged)."""
    from tito_audit.rollout.turn_start import turn_start

    history = "<u>hi<e>\n<a>Let me check.<e>\n"
    full = "<u>hi<e>\n<a>Let me check.<e>\n\n<a>call one<e>\n"
    assert turn_start(history + "<a>", full, lambda: history) == full.index("call one")
    # a generation prompt that history lacks (thinking off): the turn starts where they part
    prefill = "<u>hi<e>\n<a><think></think>"
    assert turn_start(prefill, "<u>hi<e>\n<a>answer<e>\n", lambda: "<u>hi<e>\n") == len("<u>hi<e>\n<a>")


@needs_corpus
def test_hermes_tool_use_template_has_no_stop_inside_its_turns(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from tito_audit.cli import app

    out = tmp_path / "report.json"
    template = CORPUS / "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja"
    args = ["audit", "qwen3-0.6b", "--chat-template", str(template), "-f", "json", "-o", str(out), "-q"]
    CliRunner().invoke(app, args)
    [model] = json.loads(out.read_text())["models"]
    tool_append = next(c for c in model["checks"] if c["id"] == "tool_append_prefix")
    assert model["verdict"] == "tito-required" and "unsafe:stop_inside_turn" not in model["verdict_reasons"]
    assert tool_append["status"] == "pass", tool_append["summary"]


COHERE_WORDS = (
    "<BOS_TOKEN>",
    "<|START_OF_TURN_TOKEN|>",
    "<|END_OF_TURN_TOKEN|>",
    "<|SYSTEM_TOKEN|>",
    "<|USER_TOKEN|>",
    "<|CHATBOT_TOKEN|>",
    "<|START_RESPONSE|>",
    "<|END_RESPONSE|>",
    "<|START_ACTION|>",
    "<|END_ACTION|>",
    "<|START_TOOL_RESULT|>",
    "<|END_TOOL_RESULT|>",
)


def command_r_folder(tmp_path: Path, loaded: Any) -> str:
    """A model folder: Qwen2.5's tokenizer with Command-R's control tokens added as specials, its eos the turn end
    `<|END_OF_TURN_TOKEN|>` (as Command-R7B's is), and the Command-R7B-style tool template."""
    from tokenizers import AddedToken

    from tito_audit.sources.synthesized import copy_tokenizer

    tok = copy_tokenizer(loaded(QWEN25).tokenizer)
    tok.add_tokens([AddedToken(w, special=True, normalized=False) for w in COHERE_WORDS], special_tokens=True)
    tok.eos_token, tok.bos_token = "<|END_OF_TURN_TOKEN|>", "<BOS_TOKEN>"
    tok.chat_template = template("turn_end_eos_opener_last")
    tok.save_pretrained(tmp_path)
    return str(tmp_path)


def test_a_turn_closed_by_two_words_ends_at_the_last_one(tmp_path: Path, loaded) -> None:
    """Issue 40, class 6: answers close with `<|END_RESPONSE|><|END_OF_TURN_TOKEN|>`, call turns with
    `<|END_ACTION|><|END_OF_TURN_TOKEN|>`, and the render always ends with the assistant's opener
    `<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>`. Both kinds of turn end at `<|END_OF_TURN_TOKEN|>` (the eos): the
    opener that a tool result's render shares is no turn end, and an engine stopping on the eos runs past nothing."""
    model = load(command_r_folder(tmp_path, loaded))
    ctx = AuditContext(model, QUICK)
    result = run_check(REGISTRY["stop_boundary"], ctx)
    assert result.status == "pass", result.findings
    ends = {kind: seen["end"] for kind, seen in result.data["by_turn_kind"].items()}
    assert ends == {"answer": "<|END_OF_TURN_TOKEN|>", "call": "<|END_OF_TURN_TOKEN|>"}
    assert stop_names(ctx.renderer) == ["<|END_OF_TURN_TOKEN|>"]
    roles = turn_roles(ctx.renderer)
    assert roles.turn_ends == ("<|END_OF_TURN_TOKEN|>",) and roles.convention == "after_turn"
    assert "<|END_ACTION|>" in roles.call_wrappers and "<|START_OF_TURN_TOKEN|>" not in roles.turn_ends
    assert roles.answer_closers == ("<|END_RESPONSE|>", "<|END_OF_TURN_TOKEN|>")


def test_the_scan_gives_a_synthesized_model_the_eos_that_closes_its_turns(tmp_path: Path) -> None:
    """Issue 40, class 6, where it gave a false UNSAFE: the scan audits the Command-R7B-style template on a
    tokenizer synthesized from its control tokens, whose eos was the answer's first closer `<|END_RESPONSE|>`; a
    call turn never writes it, so `tool_append_prefix` reported a stop seam for an engine that stops on the eos.
    The synthesized eos is the turn's last closer, and buffer + delta is exact."""
    from tests.conftest import invoke

    folder = tmp_path / "templates"
    folder.mkdir()
    shutil.copy(DATA / "turn_end_eos_opener_last.jinja", folder)
    out = tmp_path / "scan.json"
    done = invoke("scan", folder, "--workers", "0", "--json", out, "--no-progress")
    assert done.exit_code == 0, done.output
    [result] = json.loads(out.read_text())["results"]
    assert result["tokenizer_kind"] == "synthesized"
    assert result["verdict"] == "safe" and result["verdict_reasons"] == ["low_coverage:16/16"], result


def test_the_users_opener_after_every_answer_is_no_turn_end(loaded) -> None:
    """A template that writes the user's opener `<|user|>` right after each assistant turn's `<|end|>`, even after
    the last: the word right before a user's text opens a turn, so the answer closes with `<|end|>` alone."""
    roles = turn_roles(Renderer(loaded("phi-3-mini-4k-instruct").tokenizer, template("user_opener_after_answer")))
    assert roles.answer_closers == ("<|end|>",) and roles.turn_ends == ("<|end|>",)
