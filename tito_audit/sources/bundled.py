"""The offline set shipped in ``tito_audit/templates_cache/``: audit without a network or a Hub cache.

Each bundled model is a folder with its tokenizer-side files and ``PROVENANCE.json``; ``tokenizer.json`` is
stored gzip-compressed to keep the repository small (xz saves 30% of the bytes but takes four times the CPU
to unpack, on every cold start: ``benchmarks/bench_compile_unpack.py``). It is unpacked into memory (a
tmpfs such as /dev/shm when the system has one) only because transformers' loader reads folders; the copy is
removed at exit. A folder packed with xz (an older bundle) is unpacked as well.
"""

from __future__ import annotations

import atexit
import gzip
import json
import lzma
import os
import shutil
import tempfile
import zlib
from collections.abc import Callable
from functools import cache
from pathlib import Path

from tito_audit.errors import CorruptTokenizer, ModelNotFound
from tito_audit.sources.base import ModelFiles

PREFIX = "bundled:"
_UNPACK: dict[str, Callable[[bytes], bytes]] = {".gz": gzip.decompress, ".xz": lzma.decompress}
_PACKED_GLOBS = tuple(f"*{suffix}" for suffix in _UNPACK)


def cache_root() -> Path:
    """``tito_audit/templates_cache/``, shipped inside the package (package data: a wheel or ``pip install .`` has
    it too; ``templates_cache/`` at the repository root links to it); ``TITO_AUDIT_TEMPLATES_CACHE`` names
    another."""
    env = os.environ.get("TITO_AUDIT_TEMPLATES_CACHE")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1] / "templates_cache"


@cache
def _index() -> dict[str, dict[str, str]]:
    path = cache_root() / "index.json"
    if not path.is_file():
        return {}
    data: dict[str, dict[str, str]] = json.loads(path.read_text())
    return data


def bundled_names() -> list[str]:
    return sorted(_index())


def bundled_name_for_repo(repo_id: str) -> str | None:
    """The bundled copy of a Hub repo, used to hint at an offline alternative."""
    for name, entry in _index().items():
        if entry.get("repo_id") == repo_id:
            return name
    return None


@cache
def _scratch_root() -> Path:
    shm = Path("/dev/shm")
    root = Path(tempfile.mkdtemp(prefix="tito-audit-", dir=shm if shm.is_dir() else None))
    atexit.register(shutil.rmtree, root, True)
    return root


class BundledSource:
    name = "bundled"

    def claims(self, spec: str) -> bool:
        return spec.startswith(PREFIX) or spec in _index()

    def fetch(self, spec: str) -> ModelFiles:
        name = spec.removeprefix(PREFIX)
        entry = _index().get(name)
        if entry is None:
            raise ModelNotFound(spec, f"no bundled model named {name!r} (bundled: {', '.join(bundled_names())})")
        stored = cache_root() / entry["folder"]
        folder = _scratch_root() / name
        if not folder.is_dir():
            staging = folder.with_suffix(".part")
            shutil.copytree(stored, staging, dirs_exist_ok=True, ignore=shutil.ignore_patterns(*_PACKED_GLOBS))
            for packed in (p for glob in _PACKED_GLOBS for p in stored.glob(glob)):
                try:
                    (staging / packed.stem).write_bytes(_UNPACK[packed.suffix](packed.read_bytes()))
                except (lzma.LZMAError, OSError, EOFError, zlib.error) as exc:
                    raise CorruptTokenizer(spec, f"{packed.name} is corrupt: {exc}") from exc
            staging.rename(folder)
        return ModelFiles(
            spec=spec,
            folder=folder,
            source="bundled",
            repo_id=entry.get("repo_id"),
            revision=entry.get("revision"),
            license=entry.get("license"),
        )
