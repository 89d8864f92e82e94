"""The tokenizer loaded without AutoTokenizer is AutoTokenizer's: the same class, state and renders.

``tito_audit.sources.tokenizer`` picks the class AutoTokenizer would from the tokenizer files and calls its
``from_pretrained`` directly (sparing AutoTokenizer's model-config machinery and the torch import it brings).
These tests hold that to transformers itself: every tokenizer class name transformers knows resolves to the
class ``AutoTokenizer`` picks; on every shared model the two tokenizers have the same backend, special tokens,
init arguments and template, and render byte- and id-identical text, for the model's own template and for a
sample of the corpus templates the scan audits (every 40th of ../shared/template-corpus: 20 templates; the
whole corpus is left to the scan's own tests, for time).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SHARED, SHARED_MODELS, snapshot
from tito_audit.rendering import Renderer, RenderError
from tito_audit.scenarios.catalog import build_scenarios
from tito_audit.sources.bundled import BundledSource, bundled_names
from tito_audit.sources.tokenizer import class_for_name, declared_class, load_declared

CORPUS = SHARED / "template-corpus"
CORPUS_SAMPLE = sorted(CORPUS.glob("*.jinja"))[::40]
# Conversation shapes that reach most template branches: plain, system, tool call and result, multi-turn, thinking.
SCENARIOS = build_scenarios(["<|im_end|>", "<|eot_id|>"], thinking_modes=({}, {"enable_thinking": False}))

_PAIRS: dict[str, tuple[object, object]] = {}


def _pair(model: str) -> tuple[object, object]:
    """(AutoTokenizer's tokenizer, the directly loaded one) for a shared model's snapshot folder."""
    if model not in _PAIRS:
        _PAIRS[model] = _load_both(snapshot(model))
    return _PAIRS[model]


def _load_both(folder: Path) -> tuple[object, object]:
    from transformers import AutoTokenizer

    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    cls = declared_class(folder, config)
    assert cls is not None, f"{folder}: its files decide the class, yet the direct path was not taken"
    return AutoTokenizer.from_pretrained(str(folder)), load_declared(folder, cls)


def _autotokenizer_choice(name: str) -> type:
    """AutoTokenizer's own steps for a ``tokenizer_class`` with no model config, with transformers' resolver."""
    from transformers.models.auto.tokenization_auto import tokenizer_class_from_name
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    stripped = name.removesuffix("Fast")
    cls = tokenizer_class_from_name(stripped)
    if cls is None and not stripped.endswith("Fast"):
        cls = tokenizer_class_from_name(stripped + "Fast")
    if cls is not None and cls.__name__ == "PythonBackend":
        cls = TokenizersBackend
    return cls or TokenizersBackend


@pytest.mark.slow
def test_every_known_class_name_resolves_as_autotokenizer_does() -> None:
    """All tokenizer classes transformers maps a model type to (with and without ``Fast``), the generic names and
    an unknown one: the direct resolver gives AutoTokenizer's class, or declines (then AutoTokenizer decides)."""
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES

    names = sorted({v for v in TOKENIZER_MAPPING_NAMES.values() if v})
    names += [n + "Fast" for n in names]
    names += ["PreTrainedTokenizerFast", "PreTrainedTokenizer", "TokenizersBackend", "NoSuchTokenizer"]
    decided = 0
    for name in names:
        ours = class_for_name(name)
        if ours is None:
            continue
        assert ours is _autotokenizer_choice(name), name
        decided += 1
    assert decided >= 0.9 * len(names)  # declining is the exception (placeholders for missing dependencies)


# In a fresh process (the test process may have imported ``transformers.models`` already): resolve a class through
# ``class_for_name``, which imports ``transformers.models`` reusing the scan ``import transformers`` made, then
# build the models package's lazy module again from a fresh scan of transformers' own call and compare its state.
_REUSED_SCAN_CHECK = """
import json, sys
from pathlib import Path
import transformers
from transformers.utils import import_utils as iu
from tito_audit.sources.tokenizer import class_for_name
scans = iu.create_import_structure_from_path.cache_info().misses
assert "transformers.models" not in sys.modules
cls = class_for_name("Qwen2Tokenizer")
scanned = iu.create_import_structure_from_path.cache_info().misses - scans
import transformers.models as models
init = str(Path(iu.__file__).parents[1] / "models" / "__init__.py")
fresh = iu._LazyModule(models.__name__, init, iu.define_import_structure.__wrapped__(init), module_spec=models.__spec__)
same = {a: getattr(fresh, a) == getattr(models, a) for a in
        ("_class_to_module", "_modules", "_object_missing_backend", "_import_structure", "__path__", "__file__")}
same["__all__"] = sorted(fresh.__all__) == sorted(models.__all__)
print(json.dumps({"scanned": scanned, "same": same, "classes": len(models._class_to_module),
                  "class": cls.__module__ + "." + cls.__name__}))
"""


@pytest.mark.slow
def test_models_package_reusing_the_scan_is_transformers_own() -> None:
    """Resolving a class imports ``transformers.models`` without its second scan of the models folder, and the
    package it gets is the one transformers builds from a fresh scan (every class, module and missing backend)."""
    out = subprocess.run(
        [sys.executable, "-c", _REUSED_SCAN_CHECK], capture_output=True, text=True, timeout=300, check=True
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["class"] == "transformers.models.qwen2.tokenization_qwen2.Qwen2Tokenizer"
    assert got["classes"] > 1000
    assert got["scanned"] < 10, "transformers.models rescanned its folder: the reuse was not taken"
    assert all(got["same"].values()), got["same"]


def test_a_model_config_or_remote_code_leaves_the_choice_to_autotokenizer(tmp_path: Path) -> None:
    folder = snapshot("Qwen/Qwen3-0.6B")
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert declared_class(folder, config) is not None
    assert declared_class(folder, {**config, "auto_map": {"AutoTokenizer": ["x.Y", None]}}) is None
    assert declared_class(folder, {k: v for k, v in config.items() if k != "tokenizer_class"}) is None
    (tmp_path / "config.json").write_text('{"model_type": "qwen3"}')
    assert declared_class(tmp_path, config) is None


def _assert_same_tokenizer(auto: Any, direct: Any) -> None:
    assert type(direct) is type(auto)
    assert direct._tokenizer.to_str() == auto._tokenizer.to_str()  # the whole Rust tokenizer, vocabulary included
    assert repr(direct.init_kwargs) == repr(auto.init_kwargs)
    assert direct.special_tokens_map == auto.special_tokens_map
    assert repr(direct.added_tokens_decoder) == repr(auto.added_tokens_decoder)
    assert direct.chat_template == auto.chat_template
    assert len(direct) == len(auto)


@pytest.mark.slow
@pytest.mark.parametrize("model", SHARED_MODELS)
def test_same_tokenizer_as_autotokenizer(model: str) -> None:
    _assert_same_tokenizer(*_pair(model))


@pytest.mark.slow
@pytest.mark.parametrize("name", bundled_names())
def test_bundled_tokenizers_same_as_autotokenizer(name: str) -> None:
    """The scan's default candidates (``--tokenizer auto``) are the bundled copies."""
    _assert_same_tokenizer(*_load_both(BundledSource().fetch(name).folder))


def _renders(tokenizer: object, template: str) -> list[object]:
    """Every scenario prefix rendered (text, then sanitized ids) through the project's sandboxed Renderer; a
    refusal is recorded by its kind and message."""
    out: list[object] = []
    for scenario in SCENARIOS:
        renderer = Renderer(tokenizer, template, scenario.kwargs)
        messages, tools = scenario.messages_list(), list(scenario.tools)
        for end in range(1, len(messages) + 1):
            agp = messages[end - 1]["role"] != "assistant"
            for render in (renderer.render, renderer.render_ids):
                try:
                    out.append(render(messages[:end], tools=tools, add_generation_prompt=agp))
                except RenderError as err:
                    out.append((err.kind, err.message))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("model", SHARED_MODELS)
def test_own_template_renders_identically(model: str) -> None:
    """The model's own template with apply_chat_template itself, text bytes and ids, on every prefix of every
    scenario, as written and without system messages (which some templates refuse)."""
    auto, direct = _pair(model)
    compared = 0
    for scenario in SCENARIOS:
        tools = list(scenario.tools)
        full = scenario.messages_list()
        for messages in (full, [m for m in full if m["role"] != "system"]):
            for end in range(1, len(messages) + 1):
                agp = messages[end - 1]["role"] != "assistant"
                results = []
                for tok in (auto, direct):
                    try:
                        kwargs = dict(tools=tools, add_generation_prompt=agp, **scenario.kwargs)
                        text = tok.apply_chat_template(messages[:end], tokenize=False, **kwargs)
                        ids = tok.apply_chat_template(messages[:end], tokenize=True, return_dict=False, **kwargs)
                        results.append((text.encode("utf-8"), list(ids)))
                    except Exception as exc:  # a template that raises must raise the same way on both
                        results.append((type(exc).__name__, str(exc)))
                assert results[0] == results[1], (model, scenario.id, end)
                compared += isinstance(results[0][0], bytes)
    assert compared >= len(SCENARIOS)


@pytest.mark.slow
@pytest.mark.skipif(not CORPUS_SAMPLE, reason="shared template corpus not present")
@pytest.mark.parametrize("model", SHARED_MODELS)
def test_corpus_templates_render_identically(model: str) -> None:
    auto, direct = _pair(model)
    for path in CORPUS_SAMPLE:
        template = path.read_text(encoding="utf-8")
        assert _renders(direct, template) == _renders(auto, template), (model, path.name)


def test_loading_leaves_the_garbage_collector_as_it_found_it() -> None:
    """The collector is paused for a load only: on again after it, after a failing block, and left off when it
    was off."""
    import gc

    from tito_audit.sources.load import load_files
    from tito_audit.sources.tokenizer import collector_paused

    assert gc.isenabled()
    model = load_files(BundledSource().fetch(bundled_names()[0]))
    assert gc.isenabled() and len(model.tokenizer) > 0
    with pytest.raises(RuntimeError), collector_paused():
        assert not gc.isenabled()
        raise RuntimeError
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
