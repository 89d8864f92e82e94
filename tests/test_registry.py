"""The one registry (``tito_audit/registry.py``): what it holds, that it and the kinds' owners load light, and that
adding a check, a renderer adapter or a log format is adding one module.

The extension tests drop a toy module of each kind (``tests/data/extending/``) into its package the way a new file
in the package folder would be found, without writing into the checkout: a fresh interpreter imports the package
with one more folder in its ``__path__`` (a temporary folder holding only the toy), so the package's own discovery
finds the toy beside its modules. The toy is then seen where a user sees it: ``--help``, a real audit or replay
through the CLI, and the generated docs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import DATA, ROOT, write_jsonl
from tito_audit.registry import CHECKS, LOG_FORMATS, OUTPUT_FORMATS, RENDERERS, Entry, Registry

EXTENDING = DATA / "extending"
HEAVY = ("transformers", "tokenizers", "jinja2", "torch", "numpy", "pandas", "huggingface_hub")
# (the sandboxed renderer, the audit, the comparison machinery of replay): never needed to list what is registered
PIPELINE = ("tito_audit.rendering.renderer", "tito_audit.audit", "tito_audit.engines.seam", "tito_audit.replay.analyze")


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=900
    )


# --- the registry itself ---------------------------------------------------------------------------------------


def test_names_and_aliases_are_unique_and_listed_in_order() -> None:
    reg = Registry("thing", "tests")
    reg.register("b", "second", order=20, aliases=("bee",))
    reg.register("a", "first", order=10, meta={"choice": "X"})
    assert [e.name for e in reg.ordered()] == ["a", "b"] and reg.names() == ["b", "a"]
    assert reg.get("bee") is reg.get("b") and "bee" in reg and "c" not in reg
    assert reg.choices() == "a[@X] | b"
    for clash in ("b", "bee"):
        with pytest.raises(ValueError, match="duplicate"):
            reg.register(clash, "again")
    with pytest.raises(ValueError, match="a check entry in the thing registry"):
        reg.add(Entry("check", "c", "wrong kind"))
    reg.remove("bee")
    assert "b" not in reg and "bee" not in reg


def test_an_empty_registry_refuses_to_be_decided_on() -> None:
    with pytest.raises(RuntimeError, match="import the package in tito_audit/engines first"):
        Registry("renderer", "tito_audit/engines").require()


def test_install_hints_come_from_the_entry() -> None:
    assert Entry("renderer", "x", "", extra="mistral").install_hint() == "pip install 'tito-audit[mistral]'"
    assert Entry("renderer", "x", "").install_hint() == ""


def test_the_registry_and_every_listing_load_without_transformers() -> None:
    """The registry, and the packages that fill the renderer, log-format and output-format registries (what
    ``--help`` lists), import none of the heavy libraries and none of the pipeline; transformers is made
    unimportable, so a hidden import of it fails the test."""
    code = (
        "import sys; sys.modules['transformers'] = None; "
        "import tito_audit.registry as r; "
        "import tito_audit.engines, tito_audit.formats, tito_audit.replay.log_formats; "
        "print(len(r.RENDERERS), len(r.LOG_FORMATS), len(r.OUTPUT_FORMATS)); "
        f"print(sorted(m for m in sys.modules if m in {HEAVY!r} and sys.modules[m] is not None "
        f"or m.startswith({PIPELINE!r})))"
    )
    out = _python(code)
    assert out.returncode == 0, out.stderr
    counts, loaded = out.stdout.splitlines()
    assert counts == "5 3 5"
    assert loaded == "[]"


def test_what_is_registered_matches_the_package() -> None:
    import tito_audit.audit.checks
    import tito_audit.engines
    import tito_audit.formats
    import tito_audit.replay.log_formats  # noqa: F401

    assert RENDERERS.choices() == (
        "jinja | renderers[@FAMILY] | mistral-common[@FILE] | openai-harmony | module:function | file.py:function"
    )
    assert [e.name for e in LOG_FORMATS.ordered()] == ["native", "vllm", "skyrl"]
    assert [e.name for e in OUTPUT_FORMATS.ordered()] == ["terminal", "json", "markdown", "html", "sarif"]
    assert len(CHECKS) == 18 and all(e.doc for e in CHECKS)  # every check carries its module's documentation


def test_every_extra_a_renderer_names_is_declared() -> None:
    """A renderer's "pip install tito-audit[EXTRA]" hint names an extra pyproject.toml declares, and the `engines`
    extra installs what each of them does."""
    import tito_audit.engines  # noqa: F401

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    named = sorted(e.extra for e in RENDERERS if e.extra)
    assert named == ["encoders", "harmony", "mistral", "renderers"]
    for extra in named:
        assert extra in extras and set(extras[extra]) <= set(extras["engines"]), extra


# --- adding one module ----------------------------------------------------------------------------------------


def _dropped_in(package: str, toy: str, tmp_path: Path) -> str:
    """Code that imports ``package`` as if ``toy`` (a file of tests/data/extending) were one of its modules."""
    folder = tmp_path / package.replace(".", "_")
    folder.mkdir()
    shutil.copy(EXTENDING / toy, folder / toy)
    return (
        "import importlib, importlib.util, sys\n"
        f"spec = importlib.util.find_spec({package!r})\n"
        f"spec.submodule_search_locations.append({str(folder)!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        f"sys.modules[{package!r}] = module\n"
        "spec.loader.exec_module(module)\n"
        f"parent, _, name = {package!r}.rpartition('.')\n"
        "setattr(sys.modules[parent], name, module)\n"
    )


def _cli(*args: str) -> str:
    return f"import sys\nfrom tito_audit.cli import main\nsys.argv = ['tito-audit', *{list(args)!r}]\nmain()\n"


def test_a_renderer_adapter_is_one_module(tmp_path: Path) -> None:
    toy = _dropped_in("tito_audit.engines", "toy_renderer.py", tmp_path)
    helped = _python(toy + "import os; os.environ['COLUMNS'] = '300'\n" + _cli("audit", "--help"))
    assert helped.returncode == 0, helped.stderr
    assert "module:function | file.py:function | toy-chatml." in " ".join(helped.stdout.split())
    audited = _python(toy + _cli("audit", "qwen2.5-7b-instruct", "--renderer", "toy-chatml", "--format", "json"))
    assert audited.returncode in (0, 1), audited.stderr
    model = json.loads(audited.stdout)["models"][0]
    assert model["renderers"]["engine"]["name"] == "toy-chatml"
    assert model["renderers"]["engine"]["library"] == "ChatML by hand (a toy)"
    assert model["scenarios"]["played"] >= 30  # every scenario went through the toy
    unknown = _python(_cli("audit", "qwen2.5-7b-instruct", "--renderer", "toy-chatml"))  # without the module
    assert unknown.returncode == 2 and "unknown renderer 'toy-chatml'" in unknown.stderr


def test_a_log_format_is_one_module(tmp_path: Path, plays) -> None:  # type: ignore[no-untyped-def]
    from tito_audit.replay.record import record_from_trajectory

    _, _, played = plays("qwen3-0.6b", 0.0, 0)
    log = write_jsonl(
        tmp_path / "toy.jsonl", [{"toy_episode": record_from_trajectory(p.traj, p.scenario.id)} for p in played[:3]]
    )
    replay = ("replay", str(log), "--model", "qwen3-0.6b", "--workers", "1", "--format", "json")
    toy = _dropped_in("tito_audit.replay.log_formats", "toy_log_format.py", tmp_path)
    helped = _python(toy + "import os; os.environ['COLUMNS'] = '300'\n" + _cli("replay", "--help"))
    assert helped.returncode == 0, helped.stderr
    assert "auto | native | vllm | skyrl | toy." in helped.stdout
    read = _python(toy + _cli(*replay))  # --log-format auto: detected
    records = {c["id"]: c for c in json.loads(read.stdout)["models"][0]["checks"]}["replay_records"]
    assert json.loads(read.stdout)["models"][0]["replay"]["episodes"] == 3
    assert records["status"] == "pass", records["summary"]
    unread = _python(_cli(*replay))  # without the module no record can be read
    assert unread.returncode == 2 and unread.stdout == ""
    assert "every one of 3 record(s) is malformed" in unread.stderr
    assert "unknown record layout (keys: toy_episode)" in unread.stderr


def test_a_check_is_one_module(tmp_path: Path) -> None:
    toy = _dropped_in("tito_audit.audit.checks", "toy_check.py", tmp_path)
    docs = (
        "spec = importlib.util.spec_from_file_location('generate_docs', 'scripts/generate_docs.py')\n"
        "generate = importlib.util.module_from_spec(spec); spec.loader.exec_module(generate)\n"
        "pages = {p.name: text for p, text in generate.pages().items()}\n"
        "print(json.dumps([pages.get('toy_buffer_decodes.md'), pages['checks.md']]))\n"
    )
    documented = _python(toy + "import json\n" + docs)
    assert documented.returncode == 0, documented.stderr
    page, overview = json.loads(documented.stdout)
    assert page.startswith("<!-- generated from") and "# `toy_buffer_decodes`" in page
    assert "every played episode's token buffer decodes" in page and "64 of 64 buffers decode to text" in page
    assert "| [`toy_buffer_decodes`](checks/toy_buffer_decodes.md) | Buffers decode to text | warning | — |" in overview
    audited = _python(toy + _cli("audit", "qwen3-0.6b", "--format", "json"))
    assert audited.returncode in (0, 1), audited.stderr
    model = json.loads(audited.stdout)["models"][0]
    result = {c["id"]: c for c in model["checks"]}["toy_buffer_decodes"]
    played = model["scenarios"]["played"]
    assert (result["status"], result["summary"]) == ("pass", f"{played} of {played} buffers decode to text")
    assert result["comparisons"] == played == 64
