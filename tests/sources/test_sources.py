"""Model sources: Hub ids through the real huggingface_hub cache code, local folders, bundled names, bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import snapshot, tito
from tito_audit import load
from tito_audit.errors import (
    CorruptConfig,
    CorruptTokenizer,
    ModelNotFound,
    NetworkUnavailable,
    NoChatTemplate,
    RevisionNotFound,
    TemplateCompileError,
)
from tito_audit.sources import bundled_names


def test_hub_id_resolves_through_hf_hub_cache(loaded):
    m = loaded("Qwen/Qwen3-0.6B")
    assert m.provenance.source == "hub"
    assert m.provenance.revision == snapshot("Qwen/Qwen3-0.6B").name
    assert m.provenance.template_file == "chat_template.jinja"
    assert m.provenance.eos_token == "<|im_end|>"
    assert m.provenance.vocab_size == len(m.tokenizer) > 150_000
    assert "enable_thinking" in m.chat_template


def test_explicit_revision_and_missing_revision():
    rev = snapshot("Qwen/Qwen2.5-7B-Instruct").name
    assert load(f"Qwen/Qwen2.5-7B-Instruct@{rev}").provenance.revision == rev
    with pytest.raises(RevisionNotFound, match="deadbeef"):
        load("Qwen/Qwen2.5-7B-Instruct@deadbeef")


def test_repo_not_in_cache_offline():
    with pytest.raises(NetworkUnavailable, match="offline"):
        load("nobody/does-not-exist")


def test_local_folder(tmp_path):
    folder = shutil.copytree(snapshot("openai/gpt-oss-20b"), tmp_path / "gptoss")
    m = load(str(folder))
    assert m.provenance.source == "local"
    assert m.provenance.eos_token == "<|return|>"


def test_bundled_set_loads_without_hub(monkeypatch):
    names = bundled_names()
    assert {"qwen3-0.6b", "qwen2.5-7b-instruct", "gpt-oss-20b", "deepseek-v3"} <= set(names)
    m = load("qwen3-0.6b")
    assert m.provenance.source == "bundled" and m.provenance.repo_id == "Qwen/Qwen3-0.6B"
    assert m.provenance.license and "Apache" in m.provenance.license
    hub = load("Qwen/Qwen3-0.6B")
    text = "Hello 你好 <|im_end|>\n\n"
    assert m.tokenizer.encode(text) == hub.tokenizer.encode(text)
    assert m.chat_template == hub.chat_template


def test_template_precedence_jinja_over_config():
    m = load("mistralai/Mistral-Nemo-Instruct-2407")
    cfg = json.loads((snapshot("mistralai/Mistral-Nemo-Instruct-2407") / "tokenizer_config.json").read_text())
    assert m.chat_template != cfg["chat_template"]
    assert m.provenance.template_file == "chat_template.jinja"


def test_chat_template_override(tmp_path):
    path = tmp_path / "patched.jinja"
    path.write_text("{% for m in messages %}{{ m['content'] }}<|im_end|>{% endfor %}")
    m = load("Qwen/Qwen2.5-7B-Instruct", chat_template_file=path)
    assert m.provenance.template_file == str(path)
    assert m.chat_template == path.read_text()


def _broken_copy(tmp_path: Path, name: str) -> Path:
    return Path(shutil.copytree(snapshot("Qwen/Qwen2.5-7B-Instruct"), tmp_path / name))


def test_corrupt_truncated_tokenizer_json(tmp_path):
    folder = _broken_copy(tmp_path, "trunc")
    data = (folder / "tokenizer.json").read_bytes()
    (folder / "tokenizer.json").unlink()
    (folder / "tokenizer.json").write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptTokenizer, match=r"tokenizer\.json"):
        load(str(folder))


def test_config_not_json(tmp_path):
    folder = _broken_copy(tmp_path, "cfg")
    (folder / "tokenizer_config.json").unlink()
    (folder / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(CorruptConfig, match=r"tokenizer_config\.json is not valid JSON"):
        load(str(folder))


def test_no_chat_template(tmp_path):
    folder = _broken_copy(tmp_path, "notemplate")
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    cfg.pop("chat_template")
    (folder / "tokenizer_config.json").unlink()
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    (folder / "chat_template.jinja").unlink()
    with pytest.raises(NoChatTemplate):
        load(str(folder))


@pytest.mark.parametrize(
    ("value", "error", "words"),
    [
        (42, NoChatTemplate, r"not text \(int 42\)"),  # was "the chat template is empty"
        ([{"name": "default"}], CorruptConfig, r"chat_template\[0\] is not a named template"),  # was a KeyError
    ],
)
def test_a_chat_template_that_is_no_template_says_what_it_is(tmp_path, value, error, words):
    """Red team 49: the error names the cause the file has, not another one."""
    folder = _broken_copy(tmp_path, "kind")
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    cfg["chat_template"] = value
    (folder / "tokenizer_config.json").unlink()
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    if (folder / "chat_template.jinja").exists():
        (folder / "chat_template.jinja").unlink()
    with pytest.raises(error, match=words):
        load(str(folder))


def test_a_file_given_as_the_model_is_named_as_a_file(tmp_path):
    """Red team 49: an existing file read as a Hub id, and was called "offline and not in the local cache"."""
    path = tmp_path / "emptyfile"
    path.write_text("")
    with pytest.raises(ModelNotFound, match="is a file, not a model"):
        load(str(path))


def test_template_does_not_compile(tmp_path):
    path = tmp_path / "bad.jinja"
    path.write_text("{% for m in messages %}{{ m.content }")
    with pytest.raises(TemplateCompileError, match="does not compile"):
        load("Qwen/Qwen2.5-7B-Instruct", chat_template_file=path)


def test_unknown_local_folder():
    with pytest.raises(ModelNotFound):
        load("./no/such/folder")


_FAKE_HUB = r"""
import http.server, sys, threading
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self): self._answer()
    def do_HEAD(self): self._answer()
    def _answer(self):
        code = 401 if "gated" in self.path else 403 if "forbidden" in self.path else 404
        self.send_response(code)
        if code == 404:
            self.send_header("X-Error-Code", "RepoNotFound")
        elif code == 401:
            self.send_header("X-Error-Code", "GatedRepo")
        self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"{}")
    def log_message(self, *a): pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"""


@pytest.fixture()
def fake_hub():
    proc = subprocess.Popen([sys.executable, "-c", _FAKE_HUB], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    yield f"http://127.0.0.1:{port}"
    proc.kill()


def _cli(args: list[str], env_extra: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    import os

    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "cache"), **env_extra}
    env.pop("HF_HUB_OFFLINE", None)
    return tito(*args, env=env, timeout=120)


def test_gated_missing_and_network_errors_are_one_line_exit_2(fake_hub, tmp_path):
    out = _cli(
        ["audit", "org/gated", "org/forbidden", "org/missing", "qwen2.5-7b-instruct", "--quiet"],
        {"HF_ENDPOINT": fake_hub},
        tmp_path,
    )
    assert out.returncode == 2, out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert any("org/gated" in e and "access denied" in e for e in errors), out.stderr
    assert any("org/forbidden" in e and "access denied" in e for e in errors), out.stderr
    assert any("org/missing" in e and "not found" in e for e in errors), out.stderr
    assert "Traceback" not in out.stderr
    assert "qwen2.5-7b-instruct" in out.stdout and "SAFE" in out.stdout  # the good model is still audited


def test_no_network(tmp_path):
    out = _cli(["audit", "org/anything", "--quiet"], {"HF_ENDPOINT": "http://127.0.0.1:9"}, tmp_path)
    assert out.returncode == 2
    assert "org/anything" in out.stderr and "unreachable" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("packing", ["gz", "xz", "truncated"])
def test_a_bundle_unpacks_gzip_and_xz_and_names_a_corrupt_archive(tmp_path, monkeypatch, packing):
    """The bundle ships ``tokenizer.json`` gzip-packed (quick to unpack); an xz-packed folder (an older bundle)
    still loads; a cut archive is a one-line corrupt-tokenizer error naming the file."""
    import gzip
    import lzma

    from tito_audit.errors import CorruptTokenizer
    from tito_audit.sources import bundled

    shipped = bundled.cache_root() / "phi-3-mini-4k-instruct"
    raw = gzip.decompress((shipped / "tokenizer.json.gz").read_bytes())
    vocab = load("phi-3-mini-4k-instruct").tokenizer.get_vocab()
    folder = shutil.copytree(shipped, tmp_path / f"phi-{packing}")
    if packing == "xz":
        (folder / "tokenizer.json.gz").unlink()
        (folder / "tokenizer.json.xz").write_bytes(lzma.compress(raw))
    elif packing == "truncated":
        (folder / "tokenizer.json.gz").write_bytes((shipped / "tokenizer.json.gz").read_bytes()[:100_000])
    (tmp_path / "index.json").write_text(json.dumps({folder.name: {"folder": folder.name}}))
    monkeypatch.setenv("TITO_AUDIT_TEMPLATES_CACHE", str(tmp_path))
    bundled._index.cache_clear()
    try:
        if packing == "truncated":
            with pytest.raises(CorruptTokenizer, match=r"tokenizer\.json\.gz is corrupt"):
                load(folder.name)
        else:
            model = load(folder.name)
            assert model.tokenizer.get_vocab() == vocab
    finally:
        monkeypatch.delenv("TITO_AUDIT_TEMPLATES_CACHE")
        bundled._index.cache_clear()
