"""Template switches played on the values the template tests them against (``rendering.switch_reads``).

A template that drops earlier reasoning only when ``reasoning_effort == 'low'`` looks TITO-safe in its default
mode, which is all a catalogue without that variable plays. So every context variable the template compares or
tests (not a message, not one transformers passes itself, not a reasoning switch ``AuditContext.thinking_modes``
already plays) is a switch, and each of its values that renders is played in a derived scenario of its own,
``switch/NAME=VALUE``: a system prompt, two user turns, each with a reasoning tool call and a reasoning answer
(what a rewrite on a tool append, on a user follow-up or of reasoning needs to show). The values are those the
template compares the variable with; a variable it only tests for truth or definedness is played at ``True`` and
``False``, or where neither renders at a text (``"on"``: a variable the template writes or iterates). A switch
none of whose values renders, or past ``MAX_PLAYED`` values, is named (``not_probed:switch:NAME``), never passed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tito_audit.scenarios.spec import Scenario

# Names a template reads that are not switches a caller sets: what transformers passes every render, and the
# functions and helpers jinja and transformers put in every template's globals.
RENDER_ARGUMENTS = frozenset({"messages", "tools", "documents", "add_generation_prompt", "continue_final_message"})
GLOBALS = frozenset(
    {"raise_exception", "strftime_now", "range", "dict", "lipsum", "cycler", "joiner", "namespace", "loop", "self"}
)
TEXT_VALUE = "on"  # what a variable tested only for truth is played at where neither boolean renders
MAX_PLAYED = 12  # switch values played per template (each is one derived scenario); the rest are named


@dataclass(frozen=True)
class Switches:
    """``played``: (name, value) pairs played, each in a ``switch/NAME=VALUE`` scenario; ``not_probed``: what could
    not be (``switch:NAME``: no value renders; ``switch:NAME=VALUE``: past ``MAX_PLAYED``)."""

    played: tuple[tuple[str, Any], ...] = ()
    not_probed: tuple[str, ...] = ()

    def values(self) -> dict[str, tuple[Any, ...]]:
        """Each switch's played values, in order."""
        out: dict[str, tuple[Any, ...]] = {}
        for name, value in self.played:
            out[name] = (*out.get(name, ()), value)
        return out


def candidate_switches(
    read: Iterable[tuple[str, tuple[Any, ...]]], context_names: Iterable[str], skip: Iterable[str]
) -> list[tuple[str, tuple[Any, ...]]]:
    """The switches among ``read`` (``analysis.template_switches``): context variables of the template
    (``context_names``: its undeclared variables) other than render arguments, globals and ``skip`` (kwargs given
    by the caller, switches played as thinking modes, special-token names)."""
    names = set(context_names) - RENDER_ARGUMENTS - GLOBALS - set(skip)
    return [(name, values) for name, values in read if name in names]


def playable(switches: Sequence[tuple[str, tuple[Any, ...]]], renders: Callable[[dict[str, Any]], bool]) -> Switches:
    """The values to play: each compared value that renders (``renders(kwargs)``: a probe render under them
    succeeds), and for a truth-tested switch each boolean that renders, else a text."""
    played: list[tuple[str, Any]] = []
    not_probed: list[str] = []
    for name, values in switches:
        truth = set(values) <= {True, False, None} and all(isinstance(v, bool) or v is None for v in values)
        tried = [True, False] if truth else list(values)
        kept = [v for v in tried if renders({name: v})]
        if truth and not kept and renders({name: TEXT_VALUE}):
            kept = [TEXT_VALUE]
        if not kept:
            not_probed.append(f"switch:{name}")
            continue
        for value in kept:
            if len(played) < MAX_PLAYED:
                played.append((name, value))
            else:
                not_probed.append(f"switch:{name}={json.dumps(value)}")
    return Switches(tuple(played), tuple(not_probed))


def switch_scenarios(switches: Switches, base: Scenario) -> list[Scenario]:
    """One ``switch/NAME=VALUE`` scenario per played value: ``base``'s conversation rendered under
    ``{NAME: VALUE}`` (and the kwargs ``base`` already has)."""
    out = []
    for name, value in switches.played:
        kwargs = dict(base.template_kwargs)
        kwargs[name] = value
        out.append(
            Scenario(
                id=f"switch/{name}={json.dumps(value)}",
                description=f"the template's switch {name} at {json.dumps(value)}",
                messages=base.messages,
                tools=base.tools,
                tags=base.tags | {"derived", "switch"},
                template_kwargs=tuple(sorted(kwargs.items())),
            )
        )
    return out
