"""Finding the templates to scan: every ``*.jinja`` file under a folder (or one file), in a stable order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path

from tito_audit.errors import UsageError

MAX_TEMPLATE_BYTES = 1_000_000  # a chat template larger than this is not a chat template


@dataclass(frozen=True)
class TemplateFile:
    name: str  # path relative to the scanned folder, without suffix
    path: Path


def discover(root: str | PathLike[str], pattern: str = "*.jinja") -> list[TemplateFile]:
    """Template files under ``root`` (recursively), sorted by relative path; one-line errors on bad input."""
    base = Path(root).expanduser()
    if base.is_file():
        return [TemplateFile(base.stem, base)]
    if not base.exists():
        raise UsageError(str(root), "folder does not exist")
    if not base.is_dir():
        raise UsageError(str(root), "not a folder or a template file")
    # a symlink whose target is gone is a template the folder names and that cannot be read: it is scanned (and
    # classified ``unreadable``), never left out without a word; a folder named like a template is walked into
    found = sorted(p for p in base.rglob(pattern) if p.is_file() or (p.is_symlink() and not p.exists()))
    if not found:
        raise UsageError(str(root), f"no {pattern} files in this folder")
    return [TemplateFile(str(p.relative_to(base).with_suffix("")), p) for p in found]


def discover_paths(paths: Sequence[str | PathLike[str]], pattern: str = "*.jinja") -> list[TemplateFile]:
    """Folders and files (pre-commit passes the changed files). A file given directly is named by its path as given
    (without the suffix); a folder's templates by their path relative to it, after the folder as given when several
    paths are given, so that two files with one name in two folders stay two templates. A file given twice is
    scanned once."""
    found: dict[Path, TemplateFile] = {}
    for given in paths:
        base = Path(given)
        for t in discover(given, pattern):
            if base.is_file():
                name = base.with_suffix("").as_posix()
            else:
                name = (base / t.name).as_posix() if len(paths) > 1 else t.name
            found.setdefault(t.path.resolve(), TemplateFile(name, t.path))
    return list(found.values())


def read_template(path: Path) -> str:
    """The template text; raises ``ValueError`` with a one-line reason when it cannot be a template."""
    size = path.stat().st_size
    if size > MAX_TEMPLATE_BYTES:
        raise ValueError(f"file is {size:,} bytes (limit {MAX_TEMPLATE_BYTES:,})")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    if not text.strip():
        raise ValueError("empty template")
    return text
