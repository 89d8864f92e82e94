"""``tito-audit fix``: patches built from the template's own structure, proven on real tokenizers and templates."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.conftest import CORPUS
from tito_audit.audit.context import AuditOptions
from tito_audit.cli import app
from tito_audit.errors import RenderError
from tito_audit.fix import audited_template, propose_fix, reasoning
from tito_audit.fix.markers import plan_markers
from tito_audit.fix.proof import STATUS_RANK
from tito_audit.rendering.template_source import (
    Data,
    Source,
    apply_edits,
    block_tag,
    decode_literal,
    environment,
    in_data,
    left_before,
    right_after,
    split_literal,
)
from tito_audit.rollout.tokens import common_prefix_len

runner = CliRunner()


@pytest.fixture(scope="module")
def qwen3_fix(loaded, report):
    return propose_fix(loaded("Qwen/Qwen3-0.6B"), report=report("Qwen/Qwen3-0.6B"))


# -- the Qwen3 fix, end to end -------------------------------------------------------------------------------


@pytest.mark.slow
def test_qwen3_fix_is_offered_but_not_proven_it_changes_later_prompts(qwen3_fix):
    """Issue 33 item 4: the patched Qwen3 template keeps turn 1's reasoning in turn 2's prompt, where the original
    drops it. That changes what a server renders, so the patch is offered with what it changes, never "proven"."""
    r = qwen3_fix
    assert r.status == "changes_inference" and r.exit_code == 1
    assert r.before.verdict == "unsafe" and r.after is not None and r.after.verdict != "unsafe"
    reasoning = next(p for p in r.offered if p.id == "reasoning_history")
    assert reasoning.required and not reasoning.changes_inference
    proof = r.proof
    assert proof is not None and proof.offerable and not proof.ok
    by_id = {c.id: c for c in proof.checks}
    assert by_id["tool_append_prefix"].before == "fail" and by_id["tool_append_prefix"].after == "pass"
    for c in proof.checks:  # no check regresses
        assert STATUS_RANK[c.after] <= STATUS_RANK[c.before], c
    eq = proof.equivalence
    assert eq.compared >= 30 and eq.identical == eq.compared and not eq.differences  # first turns: the same
    assert eq.later_compared > 0 and not eq.later_differences
    assert eq.prompts_compared > 0 and eq.prompt_differences and not eq.holds  # later prompts: not the same
    assert any(c.startswith("turn ≥ 3 prompts keep earlier reasoning") for c in proof.changes)
    assert any(c.startswith("turn ≥ 2 prompts keep earlier (empty) reasoning blocks") for c in proof.changes)
    assert "the patch changes deployed prompts" in r.message and "keep earlier reasoning" in r.message
    diff = r.diff()
    assert diff.count("\n-") >= 2 and "ns.last_query_index" in diff


@pytest.mark.slow
def test_qwen3_markers_wrong_with_thinking_off_are_not_offered(qwen3_fix):
    """Markers placed where the default generation prompt ends leave `<think>\\n\\n</think>` of the thinking-off
    prefill inside the mask: exact in none of those episodes, so the markers patch is rejected, saying so."""
    rejected = next(x for x in qwen3_fix.rejected if x.patch.id == "generation_markers")
    assert any("mode enable_thinking=false: exact in 0 of" in why for why in rejected.reasons)
    assert "{% generation %}" not in qwen3_fix.patched


@pytest.mark.slow
def test_patched_qwen3_template_is_audited_the_same_from_a_file(qwen3_fix, loaded, tmp_path):
    from tito_audit import audit_model, load

    path = tmp_path / "qwen3-fixed.jinja"
    path.write_text(qwen3_fix.patched, encoding="utf-8")
    again = audit_model(load("Qwen/Qwen3-0.6B", chat_template_file=path))
    assert again.verdict == qwen3_fix.after.verdict != "unsafe"
    assert again.check("tool_append_prefix").status == "pass"


@pytest.mark.slow
def test_cli_fix_writes_a_template_that_the_audit_accepts(tmp_path):
    out = tmp_path / "fixed.jinja"
    res = runner.invoke(app, ["fix", "Qwen/Qwen3-0.6B", "--output", str(out)])
    assert res.exit_code == 1, res.output  # offered, not proven: it changes later prompts
    assert "patch changes deployed prompts (turn ≥ 2 prompts" in res.output and "UNSAFE" in res.output
    assert "patch proven" not in res.output
    assert f"tito-audit audit Qwen/Qwen3-0.6B --chat-template {out}" in res.output
    assert "+++ b/chat_template.jinja" in res.output and "inference equivalence" in res.output
    audited = runner.invoke(app, ["audit", "Qwen/Qwen3-0.6B", "--chat-template", str(out), "--format", "json"])
    verdict = json.loads(audited.stdout)["models"][0]["verdict"]
    assert verdict != "unsafe"
    as_json = runner.invoke(app, ["fix", "Qwen/Qwen3-0.6B", "--format", "json"])
    data = json.loads(as_json.stdout)
    assert data["status"] == "changes_inference" and not data["proof"]["ok"] and data["template"]
    assert not data["proof"]["equivalence"]["holds"] and data["proof"]["changes"]
    assert any("keep earlier reasoning" in c for c in data["proof"]["changes"])


# -- safe models, bad input ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_safe_model_needs_nothing_or_only_optional_patches(loaded, report):
    r = propose_fix(loaded("Qwen/Qwen2.5-7B-Instruct"), report=report("Qwen/Qwen2.5-7B-Instruct"))
    assert r.before.verdict == "safe"
    assert r.status in ("nothing_to_fix", "proven") and r.exit_code == 0
    assert all(not p.required for p in r.offered)
    assert {s.id for s in r.skipped} >= {"reasoning_history"}
    res = runner.invoke(app, ["fix", "Qwen/Qwen2.5-7B-Instruct"])
    assert res.exit_code == 0
    assert "nothing to fix" in res.output or "[optional]" in res.output


def test_cli_bad_input_is_one_line_exit_2():
    res = runner.invoke(app, ["fix", "nobody/no-such-model-zz9", "--offline"])
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1 and "nobody/no-such-model-zz9" in res.stderr
    assert "Traceback" not in res.output + res.stderr
    res = runner.invoke(app, ["fix", "Qwen/Qwen3-0.6B", "--format", "xml"])
    assert res.exit_code == 2 and "xml" in res.stderr


# -- generation markers: transformers' assistant mask on real models -----------------------------------------


_CONVERSATION = [
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
        ],
    },
    {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "sunny"},
    {"role": "assistant", "content": "It is sunny."},
    {"role": "user", "content": "Thanks!"},
    {"role": "assistant", "content": "You are welcome."},
]


def _sampled_texts(renderer, messages, stop_texts):
    """What the model generates for each assistant turn: after the generation prompt, through the stop token."""
    out = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        prompt = renderer.render(messages[:i], add_generation_prompt=True)
        full = renderer.render(messages[: i + 1])
        completion = full[common_prefix_len(prompt, full) :]
        end = min(completion.find(s) + len(s) for s in stop_texts if s in completion)
        out.append(completion[:end])
    return out


@pytest.mark.parametrize(
    ("spec", "messages"),
    [
        ("Qwen/Qwen3-0.6B", _CONVERSATION),
        (
            "meta-llama/Llama-3.2-3B-Instruct",
            [m for m in _CONVERSATION if m["role"] != "tool" and "tool_calls" not in m],
        ),
        ("google/gemma-2-2b-it", [m for m in _CONVERSATION if m["role"] != "tool" and "tool_calls" not in m][1:]),
    ],
)
def test_generation_markers_mask_exactly_the_sampled_tokens(loaded, spec, messages):
    model = loaded(spec)
    audited = audited_template(model, AuditOptions(), None)
    src = Source(model.chat_template)
    history, _ = reasoning.rewrite(audited, src)  # Qwen3 drops earlier think blocks: no mask is right without this
    src = Source(apply_edits(src.text, history))
    edits, _, caveats = plan_markers(audited, src)
    patched = apply_edits(src.text, edits)
    assert not caveats
    original, marked = audited.renderer(src.text), audited.renderer(patched)
    messages = messages if messages[0]["role"] != "assistant" else messages[1:]
    # the markers render nothing: every text is byte-identical
    for k in range(1, len(messages) + 1):
        for agp in (False, True):
            try:
                assert marked.render(messages[:k], add_generation_prompt=agp) == original.render(
                    messages[:k], add_generation_prompt=agp
                )
            except RenderError:
                continue
    out = model.tokenizer.apply_chat_template(
        messages, chat_template=patched, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, mask = list(out["input_ids"]), list(out["assistant_masks"])
    runs, current = [], []
    for i, bit in enumerate(mask):
        if bit:
            current.append(ids[i])
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    masked = [model.tokenizer.decode(run, skip_special_tokens=False) for run in runs]
    expected = _sampled_texts(original, messages, audited.stop_texts)
    assert "".join(masked) == "".join(expected)
    assert all(any(text.endswith(s) for s in audited.stop_texts) for text in expected)  # stop token inside
    assert len(masked) >= len(expected)


def test_stop_token_outside_existing_markers_is_moved_inside(loaded):
    """A corpus template whose markers end before ``<|im_end|>`` (found by grepping the construct)."""
    pattern = re.compile(r"\{%-?\s*endgeneration\s*-?%\}\s*\{\{-?\s*'<\|im_end\|>")
    path = next(p for p in sorted(CORPUS.glob("*.jinja")) if pattern.search(p.read_text(encoding="utf-8")))
    from tito_audit.fix import markers

    model = loaded("Qwen/Qwen2.5-7B-Instruct").with_template(path.read_text(encoding="utf-8"), str(path))
    audited = audited_template(model, AuditOptions(), None)
    stripped = Source(markers.strip_markers(Source(model.chat_template)))
    edits, _, _ = plan_markers(audited, stripped)
    patched = apply_edits(stripped.text, edits)
    messages = [m for m in _CONVERSATION if m["role"] != "tool" and "tool_calls" not in m]
    before = model.tokenizer.apply_chat_template(
        messages, chat_template=model.chat_template, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    after = model.tokenizer.apply_chat_template(
        messages, chat_template=patched, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    assert before["input_ids"] == after["input_ids"]
    end = model.tokenizer.convert_tokens_to_ids("<|im_end|>")
    last = max(i for i, t in enumerate(after["input_ids"]) if t == end)
    assert before["assistant_masks"][last] == 0 and after["assistant_masks"][last] == 1


# -- the reasoning patch on corpus forks (selected by the construct, not by name) -----------------------------


def _forks() -> list[Path]:
    return [
        p
        for p in sorted(CORPUS.glob("*.jinja"))
        if "ns.last_query_index" in (t := p.read_text(encoding="utf-8")) and "</think>" in t and "<|im_start|>" in t
    ]


@pytest.mark.slow
def test_reasoning_patch_fixes_corpus_forks(loaded):
    from tito_audit import audit_model

    forks = _forks()
    assert len(forks) >= 20
    base = loaded("Qwen/Qwen3-0.6B")
    results = []
    for path in forks[:: max(1, len(forks) // 7)]:
        model = base.with_template(path.read_text(encoding="utf-8"), str(path))
        before = audit_model(model)
        if before.error or before.check("tool_append_prefix").status != "fail":
            continue
        results.append((path.name, propose_fix(model, report=before)))
    offered = [(name, r) for name, r in results if r.status in ("proven", "changes_inference")]
    assert len(offered) >= 3, [(n, r.message) for n, r in results]
    for name, r in offered:
        patch = next(p for p in r.offered if p.id == "reasoning_history")
        assert patch.required and r.after.verdict != "unsafe" and not r.proof.equivalence.differences, name
        # keeping reasoning on every turn changes later prompts: said, never called proven
        assert r.status == "changes_inference" and r.proof.changes, name
    for name, r in results:  # a fork that is not fixed says why the reasoning rewrite does not apply
        if r.status not in ("proven", "changes_inference"):
            why = [s.reason for s in r.skipped if s.id == "reasoning_history"]
            why += [x.reasons[0] for x in r.rejected if x.patch.id == "reasoning_history"]
            assert why and r.exit_code == 1, name


# -- tool arguments and empty content ------------------------------------------------------------------------


@pytest.mark.slow
def test_raw_dict_arguments_become_json_and_the_change_is_flagged(loaded):
    """Corpus templates printing ``tool_call.arguments`` raw, with no string test anywhere (found by grep)."""
    path = next(
        p
        for p in sorted(CORPUS.glob("*.jinja"))
        if "{{- tool_call.arguments }}" in (t := p.read_text(encoding="utf-8")) and "is string" not in t
    )
    model = loaded("Qwen/Qwen2.5-7B-Instruct").with_template(path.read_text(encoding="utf-8"), str(path))
    result = propose_fix(model)
    patch = next(p for p in result.offered if p.id == "tool_arguments_json")
    assert patch.changes_inference and result.proof.flagged
    rendered = result.patched and audited_template(model, AuditOptions(), None).renderer(result.patched).render(
        _CONVERSATION[:2]
    )
    assert '"arguments": {"city": "Paris"}' in rendered
    changed = {d.conversation.split(": ")[1] for d in result.proof.equivalence.differences}
    assert changed == {"first assistant turn"}  # prompts never change; only turns that call tools
    assert all(d.tool_call_turn for d in result.proof.equivalence.differences)


@pytest.mark.slow
def test_empty_content_rewrite_is_not_offered_silently(loaded, report):
    """DeepSeek-V3 drops tool calls when content is ''. The rewrite exists; it is only offered flagged or rejected."""
    model = loaded("deepseek-ai/DeepSeek-V3")
    result = propose_fix(model, report=report("deepseek-ai/DeepSeek-V3"))
    offered = [p for p in result.offered if p.id == "empty_content_tool_calls"]
    rejected = [r for r in result.rejected if r.patch.id == "empty_content_tool_calls"]
    assert offered or rejected
    if offered:
        assert offered[0].changes_inference and result.proof.flagged
    else:
        assert rejected[0].reasons and result.status == "no_safe_patch"
    candidate = (offered or [r.patch for r in rejected])[0]
    renderer = audited_template(model, AuditOptions(), None).renderer(candidate.template)
    call = {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": '{"a": 1}'}}
    text = renderer.render(
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    )
    assert "get_weather" in text  # the call renders once content '' means no content


# -- the source model: spans, literals, whitespace control --------------------------------------------------


def test_every_corpus_template_aligns_with_the_jinja_lexer():
    paths = sorted(CORPUS.glob("*.jinja"))
    assert len(paths) > 700
    for path in paths:
        text = path.read_text(encoding="utf-8")
        src = Source(text)
        last = 0
        for tag in src.tags:
            assert tag.start >= last and text[tag.start] == "{" and text[tag.end - 1] == "}", path.name
            last = tag.end


@given(st.text(alphabet="ab\n\t\\'\"<|>é", max_size=12), st.integers(0, 12))
def test_split_literal_keeps_the_value(value, offset):
    raw = "'" + value.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"
    assert decode_literal(raw) == value
    left, right = split_literal(raw, min(offset, len(value)))
    assert decode_literal(left) + decode_literal(right) == value


_PIECES = st.lists(
    st.sampled_from(
        [
            "x",
            " ",
            "\n",
            "  \n",
            "\n  ",
            "{{ 'v' }}",
            "{{- 'v' }}",
            "{{ 'v' -}}",
            "{% if true %}",
            "{%- if true %}",
            "{% if true -%}",
            "{# c #}",
            "{#- c -#}",
            "{% set q = 1 %}",
            "{%- set q = 1 -%}",
        ]
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=150, deadline=None)
@given(_PIECES, st.data())
def test_inserted_block_tags_render_nothing(pieces, data):
    """A tag inserted after a tag, before a tag or inside data never changes the render (trim/lstrip rules)."""
    opened = sum(1 for p in pieces if "if true" in p)
    text = "".join(pieces) + "{% endif %}" * opened
    src = Source(text)
    env = environment()
    expected = env.from_string(text).render()
    tag = data.draw(st.sampled_from(src.tags)) if src.tags else None
    spots = []
    if tag is not None:
        spots.append((tag.end, block_tag("set z = 2", "", right_after(src, tag))))
        spots.append((tag.start, block_tag("set z = 2", left_before(src, tag), "")))
    for d in [n for n in src.tree if isinstance(n, Data)]:
        a, b = src.effective(d)
        if a < b or b == d.end:  # inside what renders (or at its end when nothing after it is stripped)
            pos = data.draw(st.integers(a, b if b == d.end else b - 1))
            spots.append((pos, block_tag("set z = 2", *in_data(src, pos))))
    for pos, insert in spots:
        if any(t.start < pos < t.end for t in src.tags):
            continue
        patched = text[:pos] + insert + text[pos:]
        assert env.from_string(patched).render() == expected, (text, patched)


# -- conditions: the boolean view the reasoning patch rewrites ------------------------------------------------

_ATOMS = ("a", "b", "c", "x.y", "n > 1", "(n) > (1)", "(a) == (b)")


@st.composite
def _conditions(draw, depth: int = 0) -> str:
    kind = draw(st.sampled_from(("atom",) if depth > 2 else ("atom", "and", "or", "not", "parens", "atom")))
    if kind == "atom":
        return draw(st.sampled_from(_ATOMS))
    if kind == "not":
        return "not " + draw(_conditions(depth + 1))
    if kind == "parens":
        return "(" + draw(_conditions(depth + 1)) + ")"
    return f"({draw(_conditions(depth + 1))}) {kind} ({draw(_conditions(depth + 1))})"


@settings(max_examples=200, deadline=None)
@given(_conditions(), st.data())
def test_folding_a_condition_keeps_what_jinja_decides(condition, data):
    """``fold`` with some atoms fixed gives a condition Jinja evaluates exactly as the original with those atoms
    set, for every value of the others (``parse_bool`` unwraps only parentheses around the whole expression)."""
    from itertools import product

    from tito_audit.rendering.template_conditions import atoms, fold, parse_bool

    src = Source("{% if " + condition + " %}{% endif %}")
    expr = parse_bool(list(src.tags[0].expr))
    found = list(atoms(expr))
    fixed = {a.toks[0].start: data.draw(st.booleans()) for a in found if data.draw(st.booleans())}
    const, text = fold(src, expr, fixed)
    env = environment()
    for a, b, c, y, n in product((False, True), (False, True), (False, True), (False, True), (0, 2)):
        scope = {"a": a, "b": b, "c": c, "x": {"y": y}, "n": n}
        # the fixed atoms take their fixed values in the original: substitute them by position
        original = condition
        for atom in sorted(found, key=lambda t: -t.toks[0].start):
            start = atom.toks[0].start - len("{% if ")
            if atom.toks[0].start in fixed:
                end = atom.toks[-1].end - len("{% if ")
                original = original[:start] + str(fixed[atom.toks[0].start]).lower() + original[end:]
        want = env.from_string("{{ 1 if (" + original + ") else 0 }}").render(**scope)
        got = env.from_string("{{ 1 if (" + text + ") else 0 }}").render(**scope)
        assert want == got, (condition, fixed, text)
        if const is not None:
            assert want == str(int(const))
