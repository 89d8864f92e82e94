"""Discovery, tokenizer picking and hazards on real templates from the shared corpus."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import CORPUS, needs_corpus
from tito_audit.errors import UsageError
from tito_audit.rendering.analysis import hazards, literal_text
from tito_audit.scan.discover import discover
from tito_audit.scan.pick import Candidate, pick
from tito_audit.sources.control_tokens import control_literals


def test_discover_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        discover(tmp_path / "missing")
    with pytest.raises(UsageError, match=r"no \*\.jinja files"):
        discover(tmp_path)


def test_a_dangling_symlink_is_a_template_that_cannot_be_read(tmp_path: Path) -> None:
    """Red team 49: a ``.jinja`` symlink whose target is gone was left out of the scan without a word. It is
    scanned, and classified ``unreadable``; a folder named like a template is walked into, not scanned."""
    (tmp_path / "a.jinja").write_text("{{ messages[0].content }}")
    (tmp_path / "gone.jinja").symlink_to(tmp_path / "nowhere.jinja")
    (tmp_path / "folder.jinja").mkdir()
    assert [t.name for t in discover(tmp_path)] == ["a", "gone"]
    from tito_audit.scan import scan_directory
    from tito_audit.scan.pool import PoolLimits

    results = scan_directory(tmp_path, "qwen2.5-7b-instruct", limits=PoolLimits(workers=0), offline=True).results
    assert {r.name: r.cls for r in results}["gone"] == "unreadable"


@needs_corpus
def test_discover_corpus_matches_index() -> None:
    import json

    names = {t.name for t in discover(CORPUS)}
    index = {e["name"] for e in json.loads((CORPUS / "index.json").read_text())}
    assert names == index and len(names) == 786


def test_control_literals() -> None:
    text = "<|im_start|>user [INST] hi [/INST]<｜Assistant｜><start_of_turn></s> <think>"
    assert control_literals(text) == ["<|im_start|>", "[INST]", "[/INST]", "<｜Assistant｜>", "<start_of_turn>", "</s>"]


@needs_corpus
@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("Qwen-Qwen3-0.6B", "qwen3-0.6b"),
        ("unsloth-gpt-oss-20b", "gpt-oss-20b"),
        ("deepseek-ai-DeepSeek-V3.1", "deepseek-v3"),
        ("microsoft-Phi-3-mini-4k-instruct", "phi-3-mini-4k-instruct"),
        ("mistralai-Mistral-Nemo-Instruct-2407", "mistral-nemo-instruct-2407"),
    ],
)
def test_auto_picks_the_matching_vocabulary(template: str, expected: str) -> None:
    from tito_audit.scan import load_tokenizers
    from tito_audit.sources import bundled_names

    path = CORPUS / f"{template}.jinja"
    if not path.is_file():
        pytest.skip(f"{template} not in corpus")
    models = _models(tuple(bundled_names()), load_tokenizers)
    cands = [Candidate.of(n, m.tokenizer) for n, m in models.items()]
    assert pick(literal_text(path.read_text()), cands, {n: m.tokenizer for n, m in models.items()}).name == expected


_CACHE: dict = {}


def _models(names, loader):
    if names not in _CACHE:
        _CACHE[names] = loader(names)
    return _CACHE[names]


@needs_corpus
def test_no_real_template_is_a_security_finding() -> None:
    hits = {t.name: h for t in discover(CORPUS) for h in hazards(t.path.read_text()) if h.kind == "security"}
    assert hits == {}


def test_scan_runs_audit_model_itself(tmp_path: Path, loaded) -> None:
    """One engine: a scanned template's verdict, checks and scenarios are audit_model's on that template."""
    from tito_audit import audit_model
    from tito_audit.scan.discover import TemplateFile
    from tito_audit.scan.template_audit import audit_template

    model = loaded("qwen3-0.6b")
    path = tmp_path / "qwen3.jinja"
    path.write_text(model.chat_template)
    result = audit_template(TemplateFile("qwen3", path), model)
    expected = audit_model(model.with_template(model.chat_template, str(path)))
    assert result.engine == "audit_model"
    assert result.verdict == expected.verdict and result.cls == expected.verdict
    assert result.scenarios_ok == expected.scenarios["played"] > 10
    # the scan runs only the checks the verdict reads (verdict_inputs): the same verdict and reasons all the same
    assert result.verdict_reasons == expected.verdict_reasons
    assert result.adaptations == expected.scenarios["adaptations"]


@settings(max_examples=300, deadline=None)
@given(
    st.frozensets(st.text("<|>ab_", min_size=1, max_size=8), max_size=30),
    st.text("<|>ab_ \n", max_size=80),
)
def test_a_candidates_count_is_every_added_token_the_text_holds(added, text) -> None:
    """``Candidate.count_in`` looks a token up only where its first three characters occur: the same count as
    looking every token up (tokens inside, overlapping or prefixing others included)."""
    heads = {text[i : i + 3] for i in range(len(text) - 2)}
    assert Candidate("c", added).count_in(text, heads) == sum(1 for t in added if t in text)
