"""The rollout-log formats ``replay`` reads (``--log-format``), one module each.

Every module here registers one format in ``tito_audit.registry.LOG_FORMATS``: its name, a one-line summary, its
documentation (the module's docstring, which docs/replay.md's list is generated from), the reader
(``obj``: a record and its line number in, the episodes it holds out), and how it recognises a record
(``meta["recognises"]``, asked in ``order`` when ``--log-format auto`` detects a record's format;
``meta["not_an_object"]``, the other JSON value it reads, which the error for an unknown value names).
``tito_audit.replay.adapters`` detects and dispatches. Importing this package imports every module in it, so
adding a format is adding a module. The modules stay light at import (``tito-audit --help`` lists them).
"""

import importlib
import pkgutil

from tito_audit.registry import LOG_FORMATS

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["LOG_FORMATS"]
