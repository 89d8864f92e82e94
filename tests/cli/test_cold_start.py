"""What a cold ``tito-audit`` process imports and prints: the import structure behind the cold-start figures in
benchmarks/results/cold-start.json (timings themselves live in benchmarks/cold_start.py, never in tests).

Each test runs a fresh interpreter, since a module imported once stays imported for the whole test session.
Hiding torch (``sys.modules["torch"] = None``, which makes ``find_spec`` answer None) stands for the default
install, which has no torch.
"""

from __future__ import annotations

import os
import subprocess
import sys

_HIDE_TORCH = "import sys; sys.modules['torch'] = None; "
_RUN_CLI = "from tito_audit.cli import main; sys.argv = ['tito-audit', *sys.argv[1:]]; main()"
_REPORT_MODULES = (
    "import atexit, sys; "
    "atexit.register(lambda: print('IMPORTED', sorted(m for m in {} if m in sys.modules), file=sys.stderr)); "
)


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRANSFORMERS_NO_ADVISORY_WARNINGS": ""}  # the advisory must be silenced by us
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=600)


def _imported(stderr: str) -> list[str]:
    line = next(ln for ln in stderr.splitlines() if ln.startswith("IMPORTED"))
    return eval(line.removeprefix("IMPORTED "))  # a list literal printed by the child


def test_help_imports_no_heavy_library() -> None:
    heavy = ("transformers", "torch", "tokenizers", "jinja2", "pandas", "huggingface_hub", "numpy")
    for args in (["--help"], ["audit", "--help"], ["scan", "--help"]):
        out = _python(_REPORT_MODULES.format(heavy) + _RUN_CLI, *args)
        assert out.returncode == 0, out.stderr
        assert "--" in out.stdout
        assert _imported(out.stderr) == [], args


def test_package_names_resolve_on_first_use() -> None:
    """``import tito_audit`` imports no submodule; each public name is imported where it is defined, on first use.
    ``tito_audit.audit`` is the audit package, still callable (deprecated) as the old ``audit(specs)``."""
    code = (
        "import sys, warnings, tito_audit; assert 'tito_audit.audit' not in sys.modules; "
        "from tito_audit import audit, audit_models, load, Trajectory; "
        "import tito_audit.audit.runner; "
        "warnings.simplefilter('error'); "
        "exec('try:\\n audit([])\\nexcept DeprecationWarning as w:\\n print(\\'deprecated\\')'); "
        "print(audit.__name__, audit_models.__module__, load.__module__, Trajectory.__name__)"
    )
    out = _python(code)
    assert out.stdout.split() == [
        "deprecated",
        "tito_audit.audit",
        "tito_audit.audit.parallel",
        "tito_audit.sources.load",
        "Trajectory",
    ], out.stderr


def test_cold_audit_takes_the_direct_tokenizer_path() -> None:
    """No AutoTokenizer, no model config and no torch for a model whose tokenizer files decide its class; pandas
    only where a table is built; no pydantic (the typer pin in pyproject.toml). The output formats register
    themselves, so their modules are imported (each light at import: tests/test_registry.py), but not what only
    the writer of a format not asked for needs (pandas, which the Markdown tables are built with)."""
    watched = (
        "torch",
        "transformers.models.auto.tokenization_auto",
        "transformers.configuration_utils",
        "pandas",
        "pydantic",
    )
    out = _python(_REPORT_MODULES.format(watched) + _RUN_CLI, "audit", "Qwen/Qwen3-0.6B", "-q")
    assert out.returncode in (0, 1), out.stderr
    assert "Qwen/Qwen3-0.6B" in out.stdout
    assert _imported(out.stderr) == []


def test_no_pytorch_advisory_without_torch() -> None:
    """transformers alone prints the advisory where torch is missing; no tito-audit command does."""
    bare = _python(_HIDE_TORCH + "import transformers")
    assert "PyTorch was not found" in bare.stderr  # the condition is real in this environment
    for args in (["--help"], ["audit", "Qwen/Qwen3-0.6B", "-q"], ["audit", "no/such-model-xyz", "-q"]):
        out = _python(_HIDE_TORCH + _RUN_CLI, *args)
        assert "PyTorch was not found" not in out.stderr, args
        assert "Traceback" not in out.stderr, args


def test_only_the_cli_freezes_what_a_load_leaves_alive() -> None:
    """The CLI (a process that ends with its command) moves the loaded tokenizer and the imports out of the
    garbage collector's passes; a library caller's process is left as it was, collector on, nothing frozen."""
    library = _python(
        "import gc, tito_audit; tito_audit.load('qwen3-0.6b'); print(gc.get_freeze_count(), gc.isenabled())"
    )
    assert library.stdout.split() == ["0", "True"], library.stderr
    report = (
        "import atexit, gc, sys; atexit.register(lambda: print('FROZEN', gc.get_freeze_count(), file=sys.stderr)); "
    )
    cli = _python(report + _RUN_CLI, "audit", "qwen3-0.6b", "-q")
    assert cli.returncode in (0, 1), cli.stderr
    frozen = next(ln for ln in cli.stderr.splitlines() if ln.startswith("FROZEN"))
    assert int(frozen.split()[1]) > 10_000  # the tokenizer and the imports, tens of thousands of objects
