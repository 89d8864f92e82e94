"""Rebuild ``templates_cache/`` (the bundled offline set) from a Hugging Face hub cache.

    python scripts/build_templates_cache.py ../shared/hf-hub

Only permissively licensed models are bundled; tokenizer.json is stored gzip-compressed (see sources/bundled).
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

BUNDLE = {
    "qwen2.5-7b-instruct": "Qwen/Qwen2.5-7B-Instruct",
    "qwen3-0.6b": "Qwen/Qwen3-0.6B",
    "gpt-oss-20b": "openai/gpt-oss-20b",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "mistral-nemo-instruct-2407": "mistralai/Mistral-Nemo-Instruct-2407",
    "olmo-2-1124-7b-instruct": "allenai/OLMo-2-1124-7B-Instruct",
    "phi-3-mini-4k-instruct": "microsoft/Phi-3-mini-4k-instruct",
}


def main(hub_cache: Path, out: Path) -> None:
    index = {}
    for name, repo_id in BUNDLE.items():
        repo = hub_cache / ("models--" + repo_id.replace("/", "--"))
        revision = (repo / "refs" / "main").read_text().strip()
        snap = repo / "snapshots" / revision
        dest = out / name
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        source = json.loads((snap / "SOURCE.json").read_text())
        for f in snap.iterdir():
            if f.name == "tokenizer.json":
                packed = gzip.compress(f.read_bytes(), compresslevel=9, mtime=0)  # quick to unpack: see sources/bundled
                (dest / "tokenizer.json.gz").write_bytes(packed)
            elif f.name != "SOURCE.json":
                shutil.copy(f, dest / f.name)
        provenance = {"repo_id": repo_id, "revision": revision, "license": source.get("license"), "source": source}
        (dest / "PROVENANCE.json").write_text(json.dumps(provenance, indent=2, ensure_ascii=False) + "\n")
        index[name] = {"folder": name, "repo_id": repo_id, "revision": revision, "license": source.get("license")}
    (out / "index.json").write_text(json.dumps(index, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(__file__).resolve().parents[1] / "templates_cache")
