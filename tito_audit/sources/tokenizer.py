"""Load a folder's tokenizer as ``AutoTokenizer.from_pretrained`` would, without its import cost where it can.

``AutoTokenizer`` first builds a model config (``AutoConfig``, whose module imports torch when it is installed:
seconds on a cold start), then picks a tokenizer class and calls that class's ``from_pretrained``. When the
folder has no ``config.json``, the config is an empty ``PreTrainedConfig`` (no model type, no name, no tokenizer
class), and every branch of its choice that reads the config falls through: the class is then decided by
``tokenizer_config.json`` alone. ``declared_class`` replays exactly those remaining steps (the class named in
``tokenizer_config.json``, resolved by name through transformers' own top-level module; ``TokenizersBackend`` for
byte-level ``LlamaTokenizer`` folders, for ``PythonBackend`` and for unknown names) and ``load_tokenizer`` calls
that class's ``from_pretrained`` with the arguments ``AutoTokenizer`` passes it. Everything else (a
``config.json``, remote code, no declared class, a process that has already imported ``AutoTokenizer``) goes
through ``AutoTokenizer`` itself, as does every folder where transformers lacks the private pieces this takes
(``compat``'s ``declared_tokenizer_class``). ``tests/sources/test_tokenizer_load.py`` holds both paths to the same
tokenizer and the same renders.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tito_audit import compat

_AUTO_MODULE = "transformers.models.auto.tokenization_auto"


def declared_class(folder: Path, tokenizer_config: dict[str, Any]) -> type | None:
    """The class ``AutoTokenizer.from_pretrained(str(folder))`` instantiates, when it follows from the tokenizer
    files alone; None when ``AutoTokenizer`` must decide (a model config, remote code, no declared class)."""
    if (folder / "config.json").exists() or "auto_map" in tokenizer_config:
        return None
    name = tokenizer_config.get("tokenizer_class")
    if not isinstance(name, str) or not name:
        return None
    declared = compat.pieces("declared_tokenizer_class")
    if declared is None:
        return None
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    if name.removesuffix("Fast") == "LlamaTokenizer" and declared.byte_level(str(folder)):
        return TokenizersBackend
    return class_for_name(name)


def class_for_name(name: str) -> type | None:
    """The class ``AutoTokenizer`` picks for a ``tokenizer_class`` name in ``tokenizer_config.json`` (with no
    model config): the name without ``Fast``, else with it; ``TokenizersBackend`` for ``PythonBackend`` and for
    names it does not know. None where only ``AutoTokenizer`` can say (see ``_class_from_name``)."""
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    name = name.removesuffix("Fast")
    try:
        cls = _class_from_name(name) or _class_from_name(name + "Fast")
    except LookupError:
        return None
    if cls is None or cls.__name__ == "PythonBackend":
        return TokenizersBackend
    return cls


def _class_from_name(name: str) -> type | None:
    """transformers' ``tokenizer_class_from_name`` for a process with no registered tokenizer classes: every
    tokenizer class it knows is exported by name from the top-level (lazy) module, which imports only its file.
    None for an unknown name; LookupError for a name that is not a tokenizer class (a placeholder for a missing
    dependency, say), which only ``AutoTokenizer`` reports as transformers would."""
    import transformers
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

    with models_package_reusing_its_scan():
        cls = getattr(transformers, name, None)
    if cls is None:
        return _class_from_name(name.removesuffix("Fast")) if name.endswith("Fast") else None
    if isinstance(cls, type) and issubclass(cls, PreTrainedTokenizerBase):
        return cls
    raise LookupError(name)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block, as it was after. A tokenizer load allocates hundreds
    of thousands of objects (transformers' import, the parsed tokenizer.json: a vocabulary and its merges) and
    leaves no cycles to collect, so the collector's passes over them, full ones included, are pure cost (about a
    tenth of a second for a 150k-token vocabulary). Reference counting frees everything as usual."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if _freeze_after_loads:
            gc.freeze()
        if was_enabled:
            gc.enable()


_freeze_after_loads = False


def freeze_after_loads() -> None:
    """For a process that lives for one command (the CLI): after each load, everything alive moves to the
    collector's permanent generation (``gc.freeze``). The imports and the tokenizer live until the process exits,
    and the audit that follows allocates enough to start collections that would walk them all again: about a
    tenth of a second of a cold audit. Never in a library caller's process, where frozen cyclic garbage would
    stay until it called ``gc.unfreeze``."""
    global _freeze_after_loads
    _freeze_after_loads = True


@contextmanager
def models_package_reusing_its_scan() -> Iterator[None]:
    """Around the first import of ``transformers.models``: its ``__init__`` builds its lazy import structure with
    ``define_import_structure(<models/__init__.py>)``, a scan of every file of the models folder (~0.3 s CPU),
    which ``import transformers`` has just done for the same folder (``define_import_structure(<models folder>,
    prefix="models")``), but under a path its caches do not match. While this is open, that one call is answered
    by transformers' own function on the folder itself (a file stands for its folder there), which its cache
    answers from the scan already done. ``tests/sources/test_tokenizer_load.py`` holds the structure to a fresh scan."""
    declared = compat.pieces("declared_tokenizer_class")
    if declared is None:
        yield
        return
    original = declared.scan_import_structure
    models_init = Path(declared.import_utils.__file__).parents[1] / "models" / "__init__.py"
    if "transformers.models" in sys.modules or not models_init.is_file():
        yield
        return

    def reusing_the_scan(module_path: Any, prefix: str | None = None) -> Any:
        if prefix is None and Path(module_path) == models_init:
            return original(models_init.parent)
        return original(module_path, prefix)

    with declared.scanning_with(reusing_the_scan):
        yield


def load_declared(folder: Path, cls: type) -> Any:
    """``cls.from_pretrained`` with the arguments ``AutoTokenizer.from_pretrained(str(folder))`` passes it."""
    revision = compat.pieces("declared_tokenizer_class").revision_of(str(folder), None)
    return cls.from_pretrained(str(folder), _from_auto=True, revision=revision, _commit_hash=None)  # type: ignore[attr-defined]


def load_tokenizer(folder: Path, tokenizer_config: dict[str, Any]) -> Any:
    """``AutoTokenizer.from_pretrained(str(folder))``, never with remote code (see the module docstring). A process
    that has imported ``AutoTokenizer`` already (and may have registered classes with it) pays nothing more for
    it, so it always decides there."""
    cls = None if _AUTO_MODULE in sys.modules else declared_class(folder, tokenizer_config)
    if cls is None:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False)
    return load_declared(folder, cls)
