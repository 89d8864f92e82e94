"""Every private transformers/jinja2/hypothesis/interpreter name sits behind one probe (``tito_audit.compat``),
and its fallbacks give the same reports: forced, they are compared with the fast paths on real models."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import DATA, ROOT
from tito_audit import compat

PACKAGE = ROOT / "tito_audit"
HOSTILE = DATA / "hostile"
LIBRARIES = ("transformers", "jinja2", "tokenizers")
# Where a tokenizer's own private methods are called: each module reaches them only after ``compat`` said the
# capability is there (the test below holds the modules to this list; a new one must ask compat first too).
TOKENIZER_METHOD_USERS = {
    "rendering/sanitizer.py": {"_get_control_tokens", "_encode_without_added_tokens"},
    "rendering/tokenizer_cache.py": {"_tokenizer", "_decode", "_encode_without_added_tokens", "_added_re"},
    "rendering/analysis.py": {"_parse"},  # the parse hook of compat's compile_hook (a jinja method override)
}


def _private_module_names() -> set[str]:
    """Module-level private names of the transformers modules tito-audit reaches into."""
    from transformers import tokenization_utils_base, tokenization_utils_tokenizers
    from transformers.utils import chat_template_utils, hub, import_utils

    names: set[str] = set()
    for module in (chat_template_utils, hub, import_utils, tokenization_utils_base, tokenization_utils_tokenizers):
        names |= {n for n in vars(module) if n.startswith("_") and not n.startswith("__")}
    return names | {"resolve_revision", "define_import_structure", "mark_control_tokens", "encode_marked_chat"}


def test_no_module_but_compat_imports_or_reads_a_private_library_name() -> None:
    private = _private_module_names()
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "compat.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in LIBRARIES:
                bad = [a.name for a in node.names if a.name.startswith("_") or a.name in private]
                offenders += [f"{rel}:{node.lineno} imports {b} from {node.module}" for b in bad]
            elif isinstance(node, ast.Attribute) and node.attr in private:
                offenders.append(f"{rel}:{node.lineno} reads .{node.attr}")
            elif (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls", "other"))
                and node.attr not in TOKENIZER_METHOD_USERS.get(rel, set())
                and _on_a_tokenizer(node)
            ):
                offenders.append(f"{rel}:{node.lineno} reads .{node.attr} of a tokenizer")
    assert offenders == []


def _on_a_tokenizer(node: ast.Attribute) -> bool:
    text = ast.unparse(node.value)
    return "tokenizer" in text or text in ("tok", "cls", "type(tokenizer)")


def test_the_listed_tokenizer_method_users_ask_compat() -> None:
    for rel in TOKENIZER_METHOD_USERS:
        assert "compat.pieces(" in (PACKAGE / rel).read_text(), rel


def test_each_capability_is_probed_once(monkeypatch) -> None:
    from transformers.utils import chat_template_utils as ctu

    compat.reset()
    first = compat.pieces("fast_inputs")
    monkeypatch.delattr(ctu, "_plain_template_data")
    assert compat.pieces("fast_inputs") is first  # detected once per process: not asked again
    compat.reset()
    assert compat.pieces("fast_inputs") is None  # asked again after a reset: now missing
    monkeypatch.undo()
    compat.reset()
    assert compat.available("fast_inputs")


def test_a_changed_signature_is_detected_as_missing(monkeypatch) -> None:
    """transformers 5.22's encode_marked_chat took the markers pattern as a third argument: called with two it
    failed, and special_token_injection became n/a on three models without a word. The probe sees it."""
    from transformers.utils import chat_template_utils as ctu

    def encode_marked_chat(tokenizer, chat, markers_re):  # the 5.22 signature
        raise AssertionError("never called")

    monkeypatch.setattr(ctu, "encode_marked_chat", encode_marked_chat)
    compat.reset()
    try:
        assert not compat.available("control_token_marking")
        assert "control_token_marking" in compat.library_versions()["compat_fallbacks"]
    finally:
        monkeypatch.undo()
        compat.reset()
    assert compat.available("control_token_marking")


def test_the_5_23_normalization_replica_renders_as_apply_chat_template(loaded, monkeypatch) -> None:
    """transformers 5.23 has no _normalize_chat_messages (it drops None-valued keys inline): the fast input path
    then uses compat's replica, and its renders are apply_chat_template's, None-valued keys included."""
    from transformers.utils import chat_template_utils as ctu

    from tito_audit.rendering import template_inputs

    model = loaded("qwen3-0.6b")
    call = {"type": "function", "function": {"name": "f", "arguments": {"a": 1, "b": None}}}
    conversations = [
        [{"role": "user", "content": "hi", "name": None}, {"role": "assistant", "content": "ok", "tool_calls": None}],
        [
            {"role": "system", "content": "s", "reasoning_content": None},
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": "", "reasoning_content": None, "tool_calls": [call]},
            {"role": "tool", "content": "r", "tool_call_id": None},
        ],
    ]
    monkeypatch.delattr(ctu, "_normalize_chat_messages")
    compat.reset()
    template_inputs._VERIFIED.clear()
    try:
        assert compat.pieces("fast_inputs").normalize is compat._drop_none_keys
        for messages in conversations:
            ours = template_inputs.render_text(model.tokenizer, model.chat_template, messages, None, True, {})
            assert template_inputs._VERIFIED[type(model.tokenizer)]  # the fast path ran, checked against transformers
            theirs = model.tokenizer.apply_chat_template(
                messages, chat_template=model.chat_template, add_generation_prompt=True, tokenize=False
            )
            assert ours == theirs
    finally:
        monkeypatch.undo()
        compat.reset()
        template_inputs._VERIFIED.clear()


def _audit_json(*args: str, fallback: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != compat.FALLBACK_ENV}
    if fallback is not None:
        env[compat.FALLBACK_ENV] = fallback
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "tito_audit", "audit", *args, "--format", "json", "--jobs", "1"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=900,
    )
    assert done.returncode in (0, 1, 2), done.stderr
    return json.loads(done.stdout)


def _without_versions_and_timings(value: object) -> object:
    if isinstance(value, dict):
        return {
            k: _without_versions_and_timings(v)
            for k, v in value.items()
            if k not in ("libraries", "seconds") and not k.endswith("_seconds")
        }
    if isinstance(value, list):
        return [_without_versions_and_timings(v) for v in value]
    return value


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ("qwen3-0.6b", "deepseek-v3", "gpt-oss-20b", "mistral-nemo-instruct-2407"),
        ("qwen3-0.6b", "--chat-template", str(HOSTILE / "compile_time_fold.jinja")),
        ("qwen3-0.6b", "--chat-template", str(HOSTILE / "reads_date.jinja")),
    ],
)
def test_every_fallback_forced_gives_the_same_reports(args) -> None:
    # every rendering fallback (the search's, which keeps draws independent of the modules loaded, gives the same
    # reports only from one entry point: tests/audit/search/test_reproducible.py)
    forced = sorted(name for name, c in compat.CAPABILITIES.items() if c.fallback and c.library == "transformers")
    fast = _audit_json(*args, fallback=None)
    slow = _audit_json(*args, fallback=",".join(forced))
    assert fast["libraries"]["compat_fallbacks"] == []
    assert sorted(slow["libraries"]["compat_fallbacks"]) == forced  # the report says which paths ran
    assert _without_versions_and_timings(slow) == _without_versions_and_timings(fast)


def test_without_the_compile_cache_every_model_is_one_line_exit_2() -> None:
    env = {**os.environ, compat.FALLBACK_ENV: "compile_cache", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "tito_audit", "audit", "qwen3-0.6b", "qwen2.5-7b-instruct", "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2 and all("_compile_jinja_template" in ln and "transformers>=" in ln for ln in lines)
    assert "Traceback" not in done.stderr


_EXIT_AFTER_A_HANDLER = """
import atexit, pathlib, sys
from tito_audit.cli import _exit_now
atexit.register(lambda: pathlib.Path(sys.argv[1]).write_text("ran"))
print("flushed", end="")  # left in stdout's buffer: exit_now must write it out
_exit_now(130)
raise AssertionError("returned")
"""


@pytest.mark.parametrize("fallback", [None, "exit_handlers"])
def test_the_exit_after_an_answered_ctrl_c_runs_the_handlers_and_keeps_its_status(tmp_path, fallback) -> None:
    """``compat.exit_now`` (the CLI's exit after a Ctrl-C it answered): the exit handlers run (temporary folders
    are removed by one) and what stdout buffered is written, on the interpreter's private ``_run_exitfuncs`` and on
    its fallback, ``sys.exit``; the status is the command's. That the fast path also keeps CPython from replacing
    130 by -2 is ``tests/cli/test_interrupt.py``'s (that happens about one run in ten, never on demand)."""
    env = {k: v for k, v in os.environ.items() if k != compat.FALLBACK_ENV} | {"PYTHONPATH": str(ROOT)}
    if fallback is not None:
        env[compat.FALLBACK_ENV] = fallback
    marker = tmp_path / "handler"
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_AFTER_A_HANDLER, str(marker)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 130, done.stderr
    assert done.stdout == "flushed" and "Traceback" not in done.stderr
    assert marker.read_text() == "ran"


def test_the_exit_handlers_probe_sees_a_missing_function(monkeypatch) -> None:
    import atexit

    assert compat.available("exit_handlers")  # CPython
    monkeypatch.delattr(atexit, "_run_exitfuncs")
    compat.reset()
    try:
        assert not compat.available("exit_handlers")
        assert "exit_handlers" in compat.fallbacks()  # a report made now would name it
    finally:
        monkeypatch.undo()
        compat.reset()
    assert compat.available("exit_handlers")
