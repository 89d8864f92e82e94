"""A tokenizer synthesized from a template's own control tokens: same verdicts as the real tokenizers (measured
in benchmarks/results/synthesized-agreement.json, re-checked here), approximate in every format, merge-dependent
checks not judged, and the scan's in-place variant audits exactly what a per-template synthesis does."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import DATA, ROOT, SHARED, SHARED_MODELS
from tito_audit import audit_model
from tito_audit.audit.checks import REGISTRY
from tito_audit.audit.context import AuditOptions
from tito_audit.formats import render_report
from tito_audit.formats.scan_text import scan_markdown
from tito_audit.report.model_report import AuditReport
from tito_audit.scan import PoolLimits, scan_directory
from tito_audit.sources import bundled_names
from tito_audit.sources.control_tokens import control_literals
from tito_audit.sources.synthesized import Synthesizer, choose_base

sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_synthesized import compare, hidden_candidates

MEASURED = json.loads((ROOT / "benchmarks" / "results" / "synthesized-agreement.json").read_text())
HOSTILE = DATA / "hostile"
CORPUS = SHARED / "template-corpus"


@pytest.fixture(scope="module")
def candidates(loaded):
    return {name: loaded(name) for name in bundled_names()}


def test_verdicts_agree_with_the_real_tokenizers_as_measured(loaded, candidates) -> None:
    """Every shared model, real tokenizer hidden: verdict agreement may not drop below the committed figure."""
    committed = {r["model"]: r["verdict"]["agree"] for r in MEASURED["quick"]["models"]}
    rows = [compare(loaded(spec), candidates, "quick") for spec in SHARED_MODELS]
    agree = sum(r["verdict"]["agree"] for r in rows)
    assert agree >= sum(committed[spec] for spec in SHARED_MODELS), [r["verdict"] for r in rows]
    for row in rows:
        assert row["base"] not in row["model"].lower() and row["synthesized_tokens"], row
        # the checks judged on a synthesized tokenizer agree with the real one wherever the benchmark said so
        for cid, pair in row["checks"].items():
            if REGISTRY[cid].merge_dependent is None and MEASURED["quick"]["check_agreement"][cid]["status"] == len(
                MEASURED["quick"]["models"]
            ):
                assert pair["real"] == pair["synthesized"], (row["model"], cid, pair)


def test_a_synthesized_report_says_approximate_everywhere(loaded, candidates) -> None:
    real = loaded("meta-llama/Llama-3.2-3B-Instruct")  # no bundled tokenizer has its control tokens
    base = choose_base(real.chat_template, candidates)
    assert base.atomic == 0 and base.name in candidates
    model = Synthesizer(candidates).model(real.chat_template, "llama.jinja")
    prov = model.provenance
    assert prov.tokenizer == "synthesized" and prov.tokenizer_base == base.name
    assert {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"} <= set(prov.synthesized_tokens)
    ids = [model.tokenizer.convert_tokens_to_ids(t) for t in prov.synthesized_tokens]
    assert all(
        model.tokenizer.encode(t, add_special_tokens=False) == [i]
        for t, i in zip(prov.synthesized_tokens, ids, strict=True)
    )
    report = audit_model(model, AuditOptions(scenarios="quick"))
    assert report.verdict == audit_model(real, AuditOptions(scenarios="quick")).verdict
    assert "<|eot_id|>" in report.scenarios["stop_tokens"]
    for c in report.checks:
        if REGISTRY[c.id].merge_dependent is not None:
            assert c.status == "not_applicable" and "synthesized" in c.summary
        else:
            assert "approximate" in c.data and (
                not REGISTRY[c.id].approximate_classes or "classes" in c.data["approximate"]
            )
    doc = json.loads(render_report(AuditReport([report]), "json"))
    assert doc["models"][0]["provenance"]["tokenizer"] == "synthesized"
    assert doc["models"][0]["provenance"]["tokenizer_base"] == base.name
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, json.loads((ROOT / "docs" / "report.schema.json").read_text()))
    for fmt in ("terminal", "markdown", "html"):
        assert "approximate verdict" in render_report(AuditReport([report]), fmt), fmt
    plain = render_report(AuditReport([audit_model(real, AuditOptions(scenarios="quick"))]), "markdown")
    assert "approximate verdict" not in plain


def test_the_scans_shared_synthesis_audits_what_a_template_own_synthesis_does(loaded, candidates) -> None:
    """A scan copies each base once with every corpus control token (``vocabulary``): each template's audit on that
    copy is the audit on its own synthesized tokenizer, and the candidates themselves are left untouched."""
    vocabulary = sorted({t for p in sorted(CORPUS.glob("*.jinja"))[:200] for t in control_literals(p.read_text())})
    sizes = {n: len(m.tokenizer) for n, m in candidates.items()}
    own_only, shared = Synthesizer(candidates), Synthesizer(candidates, vocabulary)

    def outcome(model):
        r = audit_model(model, AuditOptions(scenarios="quick"))
        return r.verdict, [(c.id, c.status, len(c.findings), c.summary) for c in r.checks], r.scenarios["stop_tokens"]

    for spec in ("google/gemma-2-2b-it", "meta-llama/Llama-3.2-3B-Instruct"):
        template = loaded(spec).chat_template
        a, b = own_only.model(template, spec), shared.model(template, spec)
        assert len(b.tokenizer) > len(a.tokenizer)  # the shared copy holds the whole vocabulary...
        assert a.provenance.synthesized_tokens == b.provenance.synthesized_tokens
        assert a.provenance.vocab_size == b.provenance.vocab_size  # ...hidden from this audit
        assert outcome(a) == outcome(b), spec
    assert {n: len(m.tokenizer) for n, m in candidates.items()} == sizes


def test_scan_counts_approximate_verdicts_apart_and_names_rejected_shapes(tmp_path: Path) -> None:
    for name in ("foreign_tokens", "benign_chatml", "raises_always"):
        (tmp_path / f"{name}.jinja").write_text((HOSTILE / f"{name}.jinja").read_text())
    s = scan_directory(str(tmp_path), "auto", limits=PoolLimits(workers=0))
    by = {r.name: r for r in s.results}
    foreign = by["foreign_tokens"]
    assert foreign.approximate and foreign.verdict and foreign.tokenizer_kind == "synthesized"
    assert foreign.synthesized_tokens == ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    assert foreign.tokenizer == f"synthesized:{foreign.tokenizer_base}" and not foreign.missing_tokens
    assert not by["benign_chatml"].approximate and by["benign_chatml"].verdict
    assert s.approximate_counts == {foreign.cls: 1}
    assert s.to_dict()["verdicts"] == {"real": 1, "approximate": 1, "stand_in": 0}
    assert "1 approximate" in scan_markdown(s)
    raising = by["raises_always"]
    assert raising.cls == "always_raises" and raising.rejected
    assert raising.rejected[0]["roles"][0] in ("user", "system") and raising.rejected[0]["scenario"] in raising.reason
    assert "refuses every conversation" in raising.reason

    off = scan_directory(str(tmp_path), "auto", limits=PoolLimits(workers=0, synthesize=False))
    assert {r.name: r.cls for r in off.results}["foreign_tokens"] == "missing_tokens" and not off.approximate_counts


def test_hidden_candidates_hide_the_real_tokenizer_and_its_siblings(loaded, candidates) -> None:
    real = loaded("Qwen/Qwen2.5-7B-Instruct")
    kept = hidden_candidates(real, candidates)
    assert "qwen2.5-7b-instruct" not in kept and "qwen3-0.6b" not in kept  # both have every ChatML token
    assert kept and all(name in candidates for name in kept)


def test_a_base_copy_serializes_as_the_base_and_adds_tokens_as_a_deep_copy_would(candidates) -> None:
    """``copy_tokenizer`` (a new backend sharing the base's model) is the deep copy it replaces: the same
    serialization before and after adding control tokens, the same encodings, and the base left as it was."""
    import copy

    from tito_audit.sources.synthesized import _add, copy_tokenizer

    tokens = ["<|zq_turn|>", "[ZQ_CALL]", "<｜zq｜>"]
    text = "a <|zq_turn|> b [ZQ_CALL] c <｜zq｜> d"
    for name, model in candidates.items():
        base = model.tokenizer
        before = base._tokenizer.to_str()
        fast, deep = copy_tokenizer(base), copy.deepcopy(base)
        assert fast._tokenizer is not base._tokenizer
        assert fast._tokenizer.to_str() == before, name
        _add(fast, tokens)
        _add(deep, tokens)
        assert fast._tokenizer.to_str() == deep._tokenizer.to_str(), name
        assert fast.encode(text) == deep.encode(text) and len(fast) == len(deep) == len(base) + 3, name
        assert base._tokenizer.to_str() == before and len(base) == len(deep) - 3, name


def test_a_clone_with_another_eos_shares_the_backend_parts_and_encodes_as_its_own_cache_would(candidates) -> None:
    """``Synthesizer._specials`` gives each template's eos its own clone of the base copy; the clone takes the
    copy's added-token pattern and segment encoder (``TokenizerCache.share_backend_parts``) instead of building
    them again, and encodes exactly what a cache built for the clone alone does."""
    from tito_audit.rendering.tokenizer_cache import TokenizerCache, tokenizer_cache
    from tito_audit.sources.synthesized import _with_specials

    synthesizer = Synthesizer(candidates, ["<|zq_turn|>", "<|zq_end|>"])
    name = next(iter(candidates))
    copied, _ = synthesizer.tokenizer(name, ())
    template = "{% for m in messages %}<|zq_turn|>{{ m['content'] }}<|zq_end|>{% endfor %}"
    clone = synthesizer._specials(copied, template)
    assert clone is not copied and clone.eos_token == "<|zq_end|>" and clone._tokenizer is copied._tokenizer
    assert copied.eos_token != "<|zq_end|>"  # the clone's special-token map is its own
    # the vocabulary and merges a tokenizer class keeps (read-only model data) are shared, not copied per eos
    kept = next(c.tokenizer for c in candidates.values() if isinstance(vars(c.tokenizer).get("_merges"), list))
    twin = _with_specials(kept, {"eos_token": "<|zq_end|>"})
    assert twin.eos_token == "<|zq_end|>" != kept.eos_token
    assert twin._merges is kept._merges and twin._vocab is kept._vocab
    shared, own = tokenizer_cache(clone), TokenizerCache(clone)
    assert shared._segments is tokenizer_cache(copied)._segments is not None
    assert shared.added_re is tokenizer_cache(copied).added_re
    assert shared.special_texts == own.special_texts and "<|zq_end|>" in shared.special_texts
    text = ("<|zq_turn|>" + "hello there, " * 50 + "<|zq_end|>") * 3
    assert shared.encode(text) == own.encode(text) == clone.encode(text, add_special_tokens=False)
    assert shared.mentions_added_tokens("say <|zq_end|>") and not shared.mentions_added_tokens("say zq_end")
    # another backend is never shared
    other = TokenizerCache(candidates[list(candidates)[1]].tokenizer)
    other.share_backend_parts(tokenizer_cache(copied))
    assert other._segments is not tokenizer_cache(copied)._segments


def test_the_chosen_base_is_the_best_fit_of_every_candidate(candidates) -> None:
    """``choose_base`` encodes only the candidates that lead on the criteria needing no encoding: the same choice,
    with the same figures, as fitting every candidate."""
    from tito_audit.sources.synthesized import fit, template_roles

    templates = sorted(CORPUS.glob("*.jinja"))[::25]
    assert len(templates) > 25
    for path in templates:
        text = path.read_text(encoding="utf-8")
        roles = template_roles(text, candidates)
        every = [fit(n, m.tokenizer, text, i, m.hidden_specials, roles) for i, (n, m) in enumerate(candidates.items())]
        assert choose_base(text, candidates) == max(every, key=lambda f: f.key), path.name
