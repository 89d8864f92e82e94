"""``rendering.analysis``: the facts read from the parse jinja does while compiling a template are the facts of a
separate parse (the compiler folds the tree it compiles in place, so they must be read before it does)."""

from __future__ import annotations

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from tests.conftest import CORPUS
from tito_audit.rendering.analysis import compiled_template, hazards, read_tree, template_facts

TEMPLATES = sorted(CORPUS.glob("*.jinja"))[::25]


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.stem)
def test_facts_read_during_the_compile_are_those_of_a_fresh_parse(path) -> None:
    text = path.read_text(encoding="utf-8")
    template_facts.cache_clear()
    facts = template_facts(text)  # the corpus template is compiled here first, or was by an earlier test
    assert facts == read_tree(compiled_template(text).environment.parse(text))
    assert "_parse" not in vars(ImmutableSandboxedEnvironment)  # the hooks are gone after the compile
    assert "from_string" not in vars(ImmutableSandboxedEnvironment)


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.jinja"))[::7], ids=lambda p: p.stem)
def test_one_walk_lists_the_nodes_as_find_all_yields_them(path) -> None:
    """``descendants``: the same nodes, the same objects, in the same order as jinja's ``find_all``; and so is every
    subtree's."""
    from jinja2 import nodes

    from tito_audit.rendering.tree_order import descendants

    text = path.read_text(encoding="utf-8")
    tree = compiled_template(text).environment.parse(text)
    walked = descendants(tree)
    assert [id(n) for n in walked] == [id(n) for n in tree.find_all(nodes.Node)]
    for sub in walked[:: max(1, len(walked) // 40)]:
        assert [id(n) for n in descendants(sub)] == [id(n) for n in sub.find_all(nodes.Node)]


def test_a_constant_the_compiler_folds_is_still_a_hazard() -> None:
    """``{{ ''.__class__ }}`` compiles to a constant: the hazard is read from the tree before that."""
    template = "{{ ''.__class__ }}{% for m in messages %}{{ m['content'] }}{% endfor %}{{ 'x' ~ 'y' }}"
    template_facts.cache_clear()
    assert [h.kind for h in hazards(template)] == ["security"]
    assert template_facts(template).literal_text.split("\n") == ["", "content", "x", "y"]
    assert template_facts(template).loaded_names == frozenset({"messages", "m"})


def test_control_tokens_are_transformers_own(loaded) -> None:
    """The sanitizer's control tokens (from the parse the analysis holds) are ``_get_control_tokens``' (from
    transformers' own parse), for every bundled tokenizer on corpus templates written for many vocabularies."""
    from tito_audit.rendering.sanitizer import control_tokens
    from tito_audit.sources import bundled_names

    for name in bundled_names():
        tok = loaded(name).tokenizer
        for path in TEMPLATES:
            text = path.read_text(encoding="utf-8")
            assert control_tokens(tok, text) == tuple(tok._get_control_tokens(text)), (name, path.stem)


def test_compiling_changes_no_class_of_jinjas(monkeypatch) -> None:
    """The compile hooks live on a subclass that transformers is handed for the compile, never on jinja's own
    environment class, which other threads of a library caller's process may be compiling with meanwhile."""
    from tito_audit.rendering import analysis

    before = dict(vars(ImmutableSandboxedEnvironment))
    during: list[dict] = []
    read = analysis.read_tree
    monkeypatch.setattr(
        analysis, "read_tree", lambda tree: during.append(dict(vars(ImmutableSandboxedEnvironment))) or read(tree)
    )
    compiled = compiled_template("{{ 'a template no other test compiles' }}{{ messages | length }}")
    assert during == [before]  # read once, as it was parsed, with jinja's class as it always is
    assert dict(vars(ImmutableSandboxedEnvironment)) == before
    assert isinstance(compiled.environment, ImmutableSandboxedEnvironment) and not compiled.environment.optimized


def test_a_transformers_that_compiles_another_way_still_compiles_under_limits(monkeypatch) -> None:
    """The parse hook depends on transformers building its environment from the class its module names: where it
    no longer does (compat's ``compile_hook`` missing), the whole compile runs under the compile limits, jinja's
    optimizer on, so constant output computed at compile time is stopped there: never a compile without limits."""
    from transformers.utils import chat_template_utils

    from tito_audit import compat
    from tito_audit.rendering import analysis
    from tito_audit.rendering.analysis import CompileLimitError
    from tito_audit.rendering.guard import RenderLimits

    other = type("AnotherEnvironment", (ImmutableSandboxedEnvironment,), {})  # what a later transformers might use
    monkeypatch.setattr(chat_template_utils, "ImmutableSandboxedEnvironment", other)
    monkeypatch.setattr(analysis, "COMPILE_LIMITS", RenderLimits(seconds=0.2))
    compat.reset()
    try:
        assert not compat.available("compile_hook")
        with pytest.raises(CompileLimitError):
            compiled_template("{{ ('ab' * 10**8) | length }}" * 10)  # written while compiling: a second of CPU
    finally:
        monkeypatch.undo()
        compat.reset()
    assert compat.available("compile_hook")
