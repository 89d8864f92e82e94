"""Control tokens and stops read by role from any template (issue 32): turn ends where the template closes an
assistant turn, outside every content and argument slot, openers, channel and call wrappers; the scan's tokenizer
holds each of them as one token or the verdict is approximate; GLM's next-opener stop; tool declarations and call
ids in the shapes templates read."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.conftest import CORPUS, needs_corpus
from tito_audit import AuditOptions, audit_model
from tito_audit.rendering.renderer import Renderer
from tito_audit.rollout import Trajectory, stop_token_ids
from tito_audit.rollout.probes import TOOLS
from tito_audit.sources import bundled_names
from tito_audit.sources.synthesized import Synthesizer

QUICK = AuditOptions(scenarios="quick")


@pytest.fixture(scope="module")
def candidates(loaded):
    return {name: loaded(name) for name in bundled_names()}


def corpus(name: str) -> str:
    path = CORPUS / f"{name}.jinja"
    if not path.is_file():
        pytest.skip(f"{name} not in the corpus")
    return path.read_text(encoding="utf-8")


def stops_of(model: Any) -> list[str]:
    renderer = Renderer(model.tokenizer, model.chat_template)
    return model.tokenizer.convert_ids_to_tokens(list(stop_token_ids(model.tokenizer, renderer)))


@pytest.fixture(scope="module")
def scan_one(candidates, tmp_path_factory):
    """What the scan (``--tokenizer auto``) says of one template: its worker's own function, on the bundled
    candidates loaded once."""
    from tito_audit.scan.discover import TemplateFile
    from tito_audit.scan.pick import Picker
    from tito_audit.scan.template_audit import audit_auto

    picker, synthesizer, folder = Picker(candidates), Synthesizer(candidates), tmp_path_factory.mktemp("one")

    def scan(name: str, text: str) -> Any:
        path = folder / f"{name}.jinja"
        path.write_text(text, encoding="utf-8")
        return audit_auto(TemplateFile(name, path), picker, scenarios="quick", synthesizer=synthesizer)

    return scan


# -- turn ends the template really writes ---------------------------------------------------------------------


@needs_corpus
@pytest.mark.parametrize(
    ("template", "ends", "literals"),
    [
        # closes turns with `[e~[` + newline, opens them with `]~b]`, starts with `]~!b[` (no bracket style known)
        ("MiniMaxAI-MiniMax-M2", ["[e~["], {"]~b]", "]~!b[", "<minimax:tool_call>", "</minimax:tool_call>"}),
        # `<turn|>` after an answer, `<|tool_response>` after a call: never `<|"|>` (a string argument's quote)
        ("google-gemma-4-31B-it", ["<turn|>", "<|tool_response>"], {"<|turn>", "<|channel>", "<|tool_call>"}),
        ("ByteDance-Seed-OSS", ["<seed:eos>"], {"<seed:bos>", "<seed:tool_call>", "<seed:think>"}),
        ("HuggingFaceTB-SmolVLM-256M-Instruct", ["<end_of_utterance>"], set()),
        ("LGAI-EXAONE-EXAONE-4.0-32B", ["[|endofturn|]"], {"[|user|]", "[|assistant|]"}),
    ],
)
def test_a_synthesized_tokenizer_stops_where_the_template_closes_turns(candidates, template, ends, literals) -> None:
    model = Synthesizer(candidates).model(corpus(template), template)
    assert set(ends) | literals <= set(model.provenance.synthesized_tokens)
    assert stops_of(model)[: len(ends)] == ends
    assert '<|"|>' not in stops_of(model)


def test_novel_closer_shapes_are_read_from_where_the_template_writes_them(candidates, scan_one) -> None:
    """Closers and openers of shapes no vocabulary at hand has: the stop is the template's turn end."""
    shapes = {
        "at_signs": ("@@USER@@\n", "@@BOT@@\n", " @@END@@\n"),
        "doubled": ("<<user>>\n", "<<bot>>\n", "<<eot>>"),
        "inverted": ("]]user[[ ", "]]bot[[ ", "[[stop]]\n"),
        "braces": ("{|user|}\n", "{|bot|}\n", " {|end|}\n"),
    }
    for name, (user, bot, end) in shapes.items():
        turn = "{{ m.content }}" + end
        template = (
            ("{% for m in messages %}{% if m.role == 'user' %}" + user + turn + "{% else %}" + bot + turn)
            + "{% endif %}{% endfor %}{% if add_generation_prompt %}"
            + bot
            + "{% endif %}"
        )
        model = Synthesizer(candidates).model(template, name)
        assert {user.strip(), bot.strip(), end.strip()} <= set(model.provenance.synthesized_tokens), name
        assert stops_of(model)[0] == end.strip(), name
        result = scan_one(name, template)
        assert result.approximate and end.strip() in result.synthesized_tokens, name


@needs_corpus
def test_audit_with_a_foreign_template_stops_on_its_turn_end_and_says_approximate() -> None:
    """`audit Qwen/Qwen3-0.6B --chat-template MiniMax-M2.jinja`: Qwen3's tokenizer splits `[e~[`, so the audit runs
    on a tokenizer synthesized from the template (base: the model's), says so, and stops on `[e~[`, not on
    `<|im_end|>` (a token the template never writes)."""
    from tito_audit.cli import app

    path = str(CORPUS / "MiniMaxAI-MiniMax-M2.jinja")
    corpus("MiniMaxAI-MiniMax-M2")
    res = CliRunner().invoke(app, ["audit", "Qwen/Qwen3-0.6B", "--chat-template", path, "-f", "json", "-q"])
    model = json.loads(res.stdout)["models"][0]
    assert model["scenarios"]["stop_tokens"] == ["[e~["]
    assert model["scenarios"]["stop_convention"] == "after_turn"
    assert model["provenance"]["tokenizer"] == "synthesized"
    assert model["provenance"]["tokenizer_base"] == "Qwen/Qwen3-0.6B"
    assert {"[e~[", "]~b]"} <= set(model["provenance"]["synthesized_tokens"])
    text = CliRunner().invoke(app, ["audit", "Qwen/Qwen3-0.6B", "--chat-template", path]).output
    assert "approximate verdict" in text


def test_a_tokenizer_that_splits_the_turn_end_is_named_by_stop_boundary(loaded) -> None:
    """Through the API a template can still be audited on a tokenizer that splits its turn end: stop_boundary
    says no engine stops on it."""
    from tito_audit.audit.checks import REGISTRY, run_check
    from tito_audit.audit.context import AuditContext

    template = (
        "{% for m in messages %}@@{{ m.role }}@@\n{{ m.content }} @@END@@\n{% endfor %}"
        "{% if add_generation_prompt %}@@assistant@@\n{% endif %}"
    )
    model = loaded("qwen3-0.6b").with_template(template, "split.jinja")
    ctx = AuditContext(model, QUICK)
    result = run_check(REGISTRY["stop_boundary"], ctx)
    assert any("'@@END@@', which this tokenizer splits" in f.message for f in result.findings)


# -- the GLM dual-role stop -----------------------------------------------------------------------------------

GLM_LIKE = (
    "[gMASK]<sop>{% for m in messages %}"
    "{% if m.role == 'user' %}<|user|>\n{{ m.content }}"
    "{% elif m.role == 'tool' %}<|observation|>\n{{ m.content }}"
    "{% else %}<|assistant|>\n{{ m.content or '' }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function.name }}\n{{ c.function.arguments | tojson }}"
    "</tool_call>{% endfor %}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def test_the_next_turns_opener_is_the_stop_and_the_deltas_first_token(candidates) -> None:
    """GLM writes no turn end: the engine stops on the next turn's opener (`<|observation|>` before a tool result,
    `<|user|>` before a user turn), which the template renders as that message's first token. The delta starts
    after the sampled opener: the buffer is exactly the re-render, with no doubled opener."""
    model = Synthesizer(candidates).model(GLM_LIKE, "glm_like.jinja")
    renderer = Renderer(model.tokenizer, GLM_LIKE)
    stops = stops_of(model)
    assert stops[:2] == ["<|user|>", "<|observation|>"]
    tok = model.tokenizer
    user = {"role": "user", "content": "Weather in Oslo?"}
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"a": 1}}}],
    }
    result = {"role": "tool", "tool_call_id": "c1", "content": "cold"}
    traj = Trajectory(renderer, stop_token_ids(tok, renderer))
    traj.start([user])
    turn = renderer.render_ids([user, call])[len(renderer.render_ids([user], add_generation_prompt=True)) :]
    traj.append_sampled([*turn, tok.convert_tokens_to_ids("<|observation|>")], message=call)
    traj.append_messages([result])
    assert traj.input_ids == renderer.render_ids([user, call, result], add_generation_prompt=True)
    assert traj.loss_mask.count(1) == len(turn) + 1


@needs_corpus
def test_glm_46_is_audited_with_its_next_opener_stops_and_no_stop_seam(candidates) -> None:
    model = Synthesizer(candidates).model(corpus("GLM-4.6"), "GLM-4.6")
    report = audit_model(model, QUICK)
    assert report.scenarios["stop_tokens"][:2] == ["<|user|>", "<|observation|>"]
    assert report.scenarios["stop_convention"] == "next_opener"
    seams = [f for c in report.checks for f in c.findings if f.cls == "stop_seam"]
    assert not seams, [(f.check, f.scenario, f.message) for f in seams]


def test_generation_config_listing_an_opener_says_next_opener(loaded) -> None:
    """A template that says neither convention (it ends user turns but never assistant turns): an engine's
    generation_config that lists the next turn's opener settles it."""
    from tito_audit.rollout.stop import stop_convention

    template = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
        "{% if m.role != 'assistant' %}<|im_end|>\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    model = loaded("qwen3-0.6b")
    renderer = Renderer(model.tokenizer, template)
    opener = model.tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert stop_convention(renderer) == ""
    assert stop_convention(renderer, (opener,)) == "next_opener"


def test_a_turn_end_written_only_with_the_next_message_is_the_deltas_first_token(candidates) -> None:
    """A template that closes an assistant turn only once another message follows (`<|end|>` before the next
    message, none after the last): the sampled `<|end|>` starts the delta; the buffer is the re-render."""
    template = (
        "{% for m in messages %}{% if not loop.first and messages[loop.index0 - 1].role == 'assistant' %}<|end|>"
        "{% endif %}<|{{ m.role }}|>\n{{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
    )
    model = Synthesizer(candidates).model(template, "deferred.jinja")
    renderer = Renderer(model.tokenizer, template)
    assert stops_of(model)[0] == "<|end|>"
    user, answer = {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}
    again = {"role": "user", "content": "And?"}
    traj = Trajectory(renderer, stop_token_ids(model.tokenizer, renderer))
    traj.start([user])
    turn = renderer.render_ids([user, answer])[len(renderer.render_ids([user], add_generation_prompt=True)) :]
    traj.append_sampled([*turn, model.tokenizer.convert_tokens_to_ids("<|end|>")], message=answer)
    traj.append_messages([again])
    assert traj.input_ids == renderer.render_ids([user, answer, again], add_generation_prompt=True)


# -- control literals the scan's tokenizer splits ---------------------------------------------------------------


@needs_corpus
def test_seed_oss_is_judged_with_its_control_tokens_atomic_and_approximate(scan_one) -> None:
    """Read as plain text, `<seed:eos><seed:bos>` merged across the seam and Seed-OSS came out UNSAFE
    (rewrites_on_tool_append) as a real-tokenizer verdict; with them atomic it is TITO-REQUIRED, approximate."""
    result = scan_one("ByteDance-Seed-OSS", corpus("ByteDance-Seed-OSS"))
    assert result.approximate and result.tokenizer_kind == "synthesized"
    assert {"<seed:eos>", "<seed:bos>"} <= set(result.synthesized_tokens)
    assert result.cls == "tito-required" and "unsafe:rewrites_on_tool_append" not in result.verdict_reasons


@pytest.fixture(scope="module")
def scan_models(candidates) -> dict[str, tuple[Any, Any, list[str]]]:
    """Per corpus template: the model the scan audits it on (picked, or synthesized where the pick lacks one of its
    control literals, as ``scan.template_audit`` does), a renderer, and the template's control literals."""
    from tito_audit.rendering.analysis import literal_text
    from tito_audit.scan import synthesizer_for
    from tito_audit.scan.discover import discover
    from tito_audit.scan.pick import Picker
    from tito_audit.sources.control_tokens import missing_tokens, role_literals, template_literals

    templates = discover(str(CORPUS))
    picker, synthesizer = Picker(candidates), synthesizer_for(templates, candidates)
    out = {}
    for t in templates:
        text = t.path.read_text(encoding="utf-8")
        try:
            literal = literal_text(text)
            model = candidates[picker.choose(literal).name]
            roles = role_literals(Renderer(model.tokenizer, text))
        except Exception:  # does not compile, or reaches for internals: no verdict to check
            continue
        if missing_tokens(model.tokenizer, literal, model.hidden_specials, roles):
            model = synthesizer.model(text, str(t.path), None, roles)
        out[t.name] = (model, Renderer(model.tokenizer, text), template_literals(literal, roles))
    return out


@pytest.mark.slow
@needs_corpus
def test_every_corpus_template_that_closes_turns_stops_on_what_it_writes(scan_models) -> None:
    """Corpus-wide: where a template writes a turn closer, the primary stop of the tokenizer the scan audits it
    on is written by the template right after an assistant answer, or as the next message's first control token.
    A template whose answers have no end of their own (what it writes after one also ends a message inside a turn,
    the unsloth gpt-oss ``<|end|>``) stops answers on eos: nothing it writes is their stop."""
    from tito_audit.rollout.turn_roles import ANSWER, turn_roles

    user, answer = {"role": "user", "content": "Zq9user"}, {"role": "assistant", "content": "Zq9answer"}
    system = {"role": "system", "content": "Be brief."}

    def parts(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**m, "content": [{"type": "text", "text": m["content"]}]} for m in messages]

    checked = 0
    for name, (model, renderer, _) in scan_models.items():
        if not turn_roles(renderer).end_of(ANSWER):
            continue
        stop = model.tokenizer.convert_ids_to_tokens(stop_token_ids(model.tokenizer, renderer)[0])
        written = []  # after the answer, as the last message, then as one followed by a user turn
        for frame in (lambda ms: ms, parts, lambda ms: [system, *ms], lambda ms: [system, *parts(ms)]):
            for messages in ([user, answer], [user, answer, {"role": "user", "content": "Zq9next"}]):
                try:
                    text = renderer.render(frame(messages), tools=list(TOOLS))
                except Exception:
                    continue
                if "Zq9answer" in text:
                    written.append(text.split("Zq9answer", 1)[1].split("Zq9next", 1)[0])
            if written:
                break
        assert any(stop in tail for tail in written), (name, stop, written[:1])
        checked += 1
    assert checked > 600


@pytest.mark.slow
@needs_corpus
def test_no_corpus_verdict_rests_on_a_control_literal_its_tokenizer_splits_without_saying_so(scan_models) -> None:
    """Corpus-wide: the tokenizer a real (not approximate) scan verdict rests on encodes each of the template's
    control literals (known shapes and role literals) as one token; where it would split one the scan synthesizes
    (provenance says so). The named cases of the issue are among the synthesized."""
    from tito_audit.rollout.stop import single_token
    from tito_audit.sources.synthesized import is_synthesized

    synthesized = set()
    for name, (model, _, literals) in scan_models.items():
        if is_synthesized(model.provenance):
            synthesized.add(name)
            assert all(single_token(model.tokenizer, t) is not None for t in literals), name
            continue
        split = [t for t in literals if single_token(model.tokenizer, t) is None]
        assert not split, (name, model.name, split)
    named = {"ByteDance-Seed-OSS", "google-gemma-4-31B-it", "MiniMaxAI-MiniMax-M2", "LGAI-EXAONE-EXAONE-4.0-32B"}
    assert named <= synthesized
    assert {"HuggingFaceTB-SmolVLM-256M-Instruct", "GLM-4.6"} <= synthesized


# -- tool declarations and call ids in other shapes -------------------------------------------------------------


@needs_corpus
@pytest.mark.parametrize(
    ("template", "adaptation"),
    [
        ("CohereForAI-c4ai-command-r-plus-tool_use", "adapt:tools_parameter_definitions"),
        ("microsoft-OptiMind-SFT", "adapt:tools_described"),
        ("swiss-ai-Apertus-8B-Instruct-2509", "adapt:tools_flat"),
    ],
)
def test_a_template_rejecting_the_openai_tool_schema_is_probed_with_other_shapes(
    scan_one, template: str, adaptation: str
) -> None:
    result = scan_one(template, corpus(template))
    assert result.cls != "always_raises" and result.verdict, (result.cls, result.reason)
    assert adaptation in result.verdict_reasons


def test_tools_read_as_name_description_parameter_definitions(candidates) -> None:
    template = (
        "{% for t in tools %}def {{ t.name }}({% for p, f in t.parameter_definitions.items() %}{{ p }}: "
        "{{ f.type }}{% endfor %}): {{ t.description }}\n{% endfor %}"
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content or '' }}"
        "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function | tojson }}</tool_call>{% endfor %}"
        "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    report = audit_model(candidates["qwen2.5-7b-instruct"].with_template(template, "pd.jinja"), QUICK)
    assert report.verdict != "error", report.error
    assert "adapt:tools_parameter_definitions" in report.verdict_reasons


KIMI_LIKE = (
    "{% for m in messages %}<|im_{{ m.role }}|>{{ m.role }}<|im_middle|>"
    "{% if m.tool_calls %}<|tool_calls_section_begin|>{% for c in m.tool_calls %}<|tool_call_begin|>{{ c.id }}"
    "<|tool_call_argument_begin|>{{ c.function.arguments | tojson }}<|tool_call_end|>{% endfor %}"
    "<|tool_calls_section_end|>{% elif m.role == 'tool' %}## Return of {{ m.tool_call_id }}\n{{ m.content }}"
    "{% else %}{{ m.content }}{% endif %}<|im_end|>{% endfor %}"
    "{% if add_generation_prompt %}<|im_assistant|>assistant<|im_middle|>{% endif %}"
)


@pytest.mark.parametrize("source", ["own", "moonshotai-Kimi-K2.5"])
def test_a_call_id_in_the_names_place_is_an_id_convention_not_dropped_calls(candidates, source: str) -> None:
    """Kimi-K2.x writes the call's id where its name would go (`functions.NAME:IDX`): the calls are not dropped;
    the adaptation is an id convention, named in the verdict reasons."""
    template = KIMI_LIKE if source == "own" else corpus(source)
    report = audit_model(Synthesizer(candidates).model(template, source), QUICK)
    assert not any("drops_tool_calls" in r for r in report.verdict_reasons), report.verdict_reasons
    assert "adapt:named_call_ids" in report.verdict_reasons
