"""One registry for what tito-audit can be extended with: checks, renderer adapters, log formats, output formats.

Each implementation registers itself in the module that defines it (``@check(...)`` for a check, a
``register(...)`` call for the others), with a name, a one-line summary, its documentation and the extra it
needs. Everything that lists them reads the registry: the verdict rule (which checks it needs), the CLI's help
and its "install tito-audit[EXTRA]" hints, and the generated docs pages. So adding one touches one module (and
its test), never a list elsewhere.

The registry knows nothing of where implementations live (it imports no tito_audit module and no third-party
library, so importing it is free): the package that owns a kind imports its modules, which fills the kind's
registry (``tito_audit.audit.checks`` for checks, for example). A registry read before its owner was imported
is empty, and readers that must not decide on an empty list say so (``Registry.require``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Entry:
    """One registered implementation.

    ``name`` is what users type (a check id, ``--renderer NAME``, ``--log-format NAME``, ``--format NAME``),
    ``aliases`` other names for it; ``summary`` is one line for ``--help``; ``doc`` the longer text for the docs
    pages; ``extra`` the ``pip install tito-audit[EXTRA]`` it needs (None: none); ``obj`` the implementation
    itself (a check's spec, an engine class, a reader, a formatter); ``order`` sorts the listing."""

    kind: str
    name: str
    summary: str
    obj: Any = None
    doc: str = ""
    extra: str | None = None
    aliases: tuple[str, ...] = ()
    order: int = 100
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def usage(self) -> str:
        """How a user writes it in a listing: ``meta["usage"]`` where the name is a pattern (``module:function``),
        else the name, with ``[@CHOICE]`` where it takes a choice after ``@`` (``meta["choice"]``:
        ``renderers[@FAMILY]``)."""
        if "usage" in self.meta:
            return str(self.meta["usage"])
        choice = self.meta.get("choice")
        return f"{self.name}[@{choice}]" if choice else self.name

    def install_hint(self) -> str:
        """The command that installs what it needs (``pip install 'tito-audit[mistral]'``), which every "not
        installed" message names; "" where it needs nothing beyond the default install."""
        return f"pip install 'tito-audit[{self.extra}]'" if self.extra else ""


class Registry:
    """The entries of one kind. Iterating gives registration order (the owner's import order); ``ordered`` sorts
    by ``order`` then name, as listings show them."""

    def __init__(self, kind: str, owner: str) -> None:
        self.kind = kind
        self.owner = owner  # the package whose modules register this kind (said when the registry is empty)
        self._entries: dict[str, Entry] = {}
        self._aliases: dict[str, str] = {}

    def add(self, entry: Entry) -> Entry:
        if entry.kind != self.kind:
            raise ValueError(f"a {entry.kind} entry in the {self.kind} registry")
        for name in (entry.name, *entry.aliases):
            if name in self._entries or name in self._aliases:
                raise ValueError(f"duplicate {self.kind} name {name!r}")
        self._entries[entry.name] = entry
        self._aliases.update({alias: entry.name for alias in entry.aliases})
        return entry

    def replace(self, name: str, obj: Any, **fields: Any) -> None:
        """Swap the implementation of a registered entry (and any of its other fields; its name stays): how a test
        or a plugin stands in for one implementation without touching the others."""
        entry = self._entries[self._aliases.get(name, name)]
        self._entries[entry.name] = replace(entry, obj=obj, **fields)

    def remove(self, name: str) -> None:
        entry = self._entries.pop(self._aliases.get(name, name))
        for alias in entry.aliases:
            del self._aliases[alias]

    def register(self, name: str, summary: str, obj: Any = None, **fields: Any) -> Entry:
        return self.add(Entry(self.kind, name, summary, obj, **fields))

    def get(self, name: str) -> Entry | None:
        """The entry called ``name`` (or one of its aliases), None when there is none."""
        return self._entries.get(self._aliases.get(name, name))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __iter__(self) -> Iterator[Entry]:
        return iter(list(self._entries.values()))

    def ordered(self) -> list[Entry]:
        return sorted(self._entries.values(), key=lambda e: (e.order, e.name))

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> list[str]:
        return [e.name for e in self]

    def require(self) -> Registry:
        """This registry, or ``RuntimeError`` when nothing registered yet (its owner was never imported): a reader
        that decides from the list (the verdict rule) must not decide on an empty one."""
        if not self._entries:
            raise RuntimeError(f"no {self.kind} registered: import the package in {self.owner} first")
        return self

    def choices(self, separator: str = " | ") -> str:
        """The names for a ``--help`` text, as listings order them: ``terminal | json | markdown``, each as its
        ``usage`` (``renderers[@FAMILY]``)."""
        return separator.join(e.usage for e in self.ordered())


# Owners are named by folder: a module name here would be an import of it (scripts/structure.py counts those).
CHECKS = Registry("check", "tito_audit/audit/checks")
RENDERERS = Registry("renderer", "tito_audit/engines")
LOG_FORMATS = Registry("log format", "tito_audit/replay")
OUTPUT_FORMATS = Registry("output format", "tito_audit/formats")


def lazy_exports(package: str, exports: Mapping[str, str]) -> Any:
    """A package's module ``__getattr__`` for its public names, each imported from the module ``exports`` names on
    first use and kept in the package from then on: importing a light part of a package (the token helpers, the
    default date, the log formats ``--help`` lists) does not import its heavy machinery (jinja2, transformers).
    ``__getattr__ = lazy_exports(__name__, _EXPORTS)``."""
    import importlib
    import sys

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
