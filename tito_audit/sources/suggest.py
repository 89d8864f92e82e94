"""Names close to a model spec that names nothing: the bundled names and the repo ids of the Hub cache.

``qwen3-0.6`` and ``qwen/qwen3-0.6b`` name no model, but a user who typed them meant one; the error that says so
names the closest (difflib's close matches, case-insensitively; the same name in another case first).
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from tito_audit.sources.bundled import bundled_names


def cached_repo_ids() -> list[str]:
    """Model repo ids of the Hub cache (``HF_HUB_CACHE``): its ``models--org--name`` folders, without scanning them."""
    root = os.environ.get("HF_HUB_CACHE")
    if not root:
        from huggingface_hub import constants

        root = constants.HF_HUB_CACHE
    try:
        folders = sorted(p.name for p in Path(root).iterdir() if p.name.startswith("models--"))
    except OSError:
        return []
    return [name.removeprefix("models--").replace("--", "/") for name in folders]


def close_names(spec: str, limit: int = 3) -> list[str]:
    """Up to ``limit`` known names close to ``spec`` (without its ``@revision``), the closest first."""
    wanted = spec.split("@", 1)[0].strip().lower()
    known = [*bundled_names(), *cached_repo_ids()]
    by_lower: dict[str, list[str]] = {}
    for name in known:
        by_lower.setdefault(name.lower(), []).append(name)
    same = by_lower.get(wanted, [])
    close = difflib.get_close_matches(wanted, list(by_lower), n=limit, cutoff=0.75)
    found = [*same, *(n for lower in close for n in by_lower[lower])]
    return [n for n in dict.fromkeys(found) if n != spec][:limit]


def did_you_mean(spec: str) -> str:
    """``" (did you mean qwen3-0.6b?)"``, or "" where no known name is close."""
    names = close_names(spec)
    return f" (did you mean {' or '.join(names)}?)" if names else ""
