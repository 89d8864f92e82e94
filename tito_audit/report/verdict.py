"""From check results to one word per model, and the short reasons behind it: the only place the audit's rule lives
(``replay``'s and ``rl``'s, which judge a loop and a gradient, are ``loop_verdict`` and ``rl_verdict`` beside it).

``decide`` reads each check's role from its result (``verdict_role``, declared on the check's spec with
``@check(verdict=...)``), never a check id, and the results as they are after suppressions:

1. ``unsafe``: an active finding of an ``unsafe``-role check (a template that drops tool calls or results in
   their canonical form, or whose tool appends rewrite the history). A finding proves it, so it stands even
   when another check could not run.
2. ``error``: a verdict-bearing or error-severity check errored, compared nothing, or was not run. The verdict
   never rests on a check that did not decide.
3. ``tito-required``: a finding (suppressed or not: a suppression accepts a finding, it does not make the
   template stop rewriting) of a ``tito-required``-role check, or a suppressed finding of an ``unsafe``-role
   check (the rollout loop handles it, so a token buffer is still needed). A reason whose findings are all
   suppressed reads ``tito-required:suppressed:WHAT``: the reasons, as the verdict, are read after suppressions.
4. ``safe`` otherwise.

Reasons beside the verdict never change it: ``avoid:*`` (a ``caveat``-role finding: tool traffic dropped only
in a form the rollout code can avoid), ``adapt:*`` (a conversation shape the template needs and the rollout
code must produce too), ``not_probed:*`` (what no scenario exercises, so the verdict does not cover it: a message
field no probe render shows, reasoning it never shows, ``not_probed:thinking_modes`` for a renderer whose reasoning
switches or their values could not be enumerated) and
``low_coverage:PLAYED/CATALOGUE`` (fewer than ``MIN_COVERAGE`` scenarios played).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tito_audit import registry
from tito_audit.report.check_result import CheckResult

Verdict = Literal["unsafe", "tito-required", "safe", "error"]

VERDICTS: dict[str, str] = {
    "unsafe": "the template drops tool traffic or breaks buffer + delta for tool appends: it must be patched",
    "tito-required": "buffer + delta is exact, naive re-tokenization is not: keep a token buffer",
    "safe": (
        "buffer + delta and naive re-tokenization are both exact for canonical tokens in the template's own formats "
        "(non-canonical samples and other JSON forms are reported as rates)"
    ),
    "error": "the model could not be audited, or a check the verdict needs did not decide",
}

# ``tito-required`` where a user, system or developer message a loop appends rewrites the history (the reason
# ``tito-required:rewrites_on_append``, ``history_rewrite``'s): buffer + delta holds on tool appends only
APPEND_REWRITE = "rewrites_on_append"
TITO_REQUIRED_ON_TOOL_APPENDS = (
    "buffer + delta is exact on tool appends, not where a user or system message is appended (the template rewrites "
    "the history there: begin a new trained sequence at it); naive re-tokenization is not exact: keep a token buffer"
)

# ``unsafe`` said by which of its causes holds (``ModelReport.verdict_explanation``): the template drops tool traffic
# (an ``unsafe:drops_*`` or ``unsafe:rejects_*`` reason), breaks buffer + delta (any other ``unsafe:`` reason), or both.
UNSAFE_BECAUSE = {
    "drops": "the template drops tool traffic: it must be patched",
    "breaks": "the template breaks buffer + delta: it must be patched",
    "both": "the template drops tool traffic and breaks buffer + delta: it must be patched",
}
DROPS_PREFIXES = ("drops_", "rejects_")

MIN_COVERAGE = 30  # scenarios played below which every format says the verdict rests on little

# Human words for the machine-readable reasons (the part after the prefix).
_WORDS = {
    "drops_tool_calls": "drops tool calls",
    "drops_tool_results": "drops tool results",
    "drops_arguments": "drops tool-call arguments",
    "rejects_tool_traffic": "rejects every tool conversation",
    "rewrites_on_tool_append": "rewrites the history when tool results are appended",
    "stop_inside_turn": "writes a stop token inside an assistant turn (an engine ends the turn before the rest)",
    "parallel_calls_per_turn": "parallel tool calls in one message (the template writes a turn per call)",
    "tool_calls_with_empty_content": 'tool calls next to content "" (send content None)',
    "tool_calls_with_content": "tool calls next to text content (the template drops them)",
    "parallel_calls": "parallel tool calls (the template drops all but the first)",
    "continue_final_message": "continuing a cut turn by re-rendering it (continue it from the buffer)",
    "only_with_marking": "marking control-token text (sanitize_control_tokens=True, tito_audit.Trajectory): "
    "buffer + delta or re-rendering breaks only with it",
    "only_without_marking": "rendering without control-token marking: buffer + delta or re-rendering is exact only "
    "with sanitize_control_tokens=True",
    "tool_as_user": "tool results sent as user turns",
    "system_into_user": "the system prompt merged into the first user turn",
    "arguments_string": "tool-call arguments as a JSON string",
    "results_without_name": "tool results without a `name` (OpenAI's form: the template writes them only with one)",
    "results_cut": "tool results longer than the template writes whole (it leaves out or reorders part of them)",
    "results_as_parts": "tool results sent as a list of text parts (the template writes only part of them)",
    "flat_tool_calls": "flat tool calls (name/arguments/parameters, no `function`)",
    "content_none": 'content None next to tool calls (with content "" the template drops the calls)',
    "content_empty": 'content "" next to tool calls (the template raises on content None there: send "")',
    "system_prompt": "a system message first (the template reads messages[0] as one)",
    "content_parts": "content as a list of text parts",
    "reasoning_inline": "reasoning inline in content, between the template's delimiters",
    "reasoning_emitted": "reasoning the template never renders, kept in the sampled text",
    "named_call_ids": "tool-call ids that carry the function name (functions.NAME:INDEX: the template writes the "
    "id where the name goes)",
    "tools_described": "tool declarations with a description on every parameter",
    "tools_flat": "flat tool declarations (name/description/parameters, no `function`)",
    "tools_parameter_definitions": "tool declarations as name/description/parameter_definitions",
}


@dataclass
class Decision:
    verdict: Verdict
    reasons: list[str] = field(default_factory=list)


def _add(reasons: list[str], reason: str) -> None:
    if reason not in reasons:
        reasons.append(reason)


def decide(
    checks: Sequence[CheckResult], coverage: Mapping[str, Any] | None = None, expected: Sequence[str] | None = None
) -> Decision:
    """The verdict of one model from its check results (after suppressions) and its scenario coverage.

    ``expected``: the ids of the checks the verdict needs (default: every registered verdict-bearing or
    error-severity check); one missing from ``checks`` makes the verdict ``error`` (``not_run``).
    """
    found = _Reasons()
    by_id = {c.id: c for c in checks}
    for cid in _needed(expected):
        if cid not in by_id:
            _add(found.undecided, f"error:{cid}:not_run")
    for c in checks:
        found.read(c)
    found.note_coverage(coverage or {})
    if found.unsafe:
        return Decision("unsafe", [*found.unsafe, *found.undecided, *found.notes])
    if found.undecided:
        return Decision("error", [*found.undecided, *found.notes])
    if found.buffer:
        return Decision("tito-required", [*found.buffer, *found.notes])
    return Decision("safe", found.notes)


def _needed(expected: Sequence[str] | None) -> list[str]:
    """The checks the verdict needs: ``expected``, else every registered verdict-bearing or error-severity one."""
    if expected is not None:
        return list(expected)
    return [
        e.name
        for e in registry.CHECKS.require()
        if e.meta["verdict"] in ("unsafe", "tito-required") or e.meta["severity"] == "error"
    ]


@dataclass
class _Reasons:
    """The reasons ``decide`` collects, by the verdict they lead to, each once and in the order met."""

    unsafe: list[str] = field(default_factory=list)
    undecided: list[str] = field(default_factory=list)
    buffer: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def read(self, c: CheckResult) -> None:
        """One check: whether it decided (a verdict-bearing check that errored or compared nothing did not), and
        its findings by the check's role."""
        bearing = c.verdict_role in ("unsafe", "tito-required") or c.severity == "error"
        if c.status == "error" and bearing:
            _add(self.undecided, f"error:{c.id}:check_error")
        elif c.status == "not_applicable" and bearing:
            _add(self.undecided, f"error:{c.id}:{'undecided' if c.comparisons else 'compared_nothing'}")
        active = {f.reason or c.id for f in c.findings if not f.suppressed}
        for f in c.findings:
            what = f.reason or c.id
            if c.verdict_role == "unsafe":
                if f.suppressed:
                    _add(self.buffer, f"tito-required:suppressed:{what}")
                else:
                    _add(self.unsafe, f"unsafe:{what}")
            elif c.verdict_role == "tito-required":
                # a suppressed finding keeps the verdict (the template still rewrites), said as suppressed
                _add(self.buffer, f"tito-required:{what}" if what in active else f"tito-required:suppressed:{what}")
            elif c.verdict_role == "caveat" and not f.suppressed:
                _add(self.notes, f"avoid:{what}")

    def note_coverage(self, coverage: Mapping[str, Any]) -> None:
        """Adaptations the scenarios needed, what they did not probe, and a catalogue played too thinly."""
        for name in coverage.get("adaptations", []) or []:
            _add(self.notes, f"adapt:{name}")
        for what in coverage.get("not_probed", []) or []:
            _add(self.notes, f"not_probed:{what}")
        if coverage.get("catalogue"):
            played, total = int(coverage.get("played", 0)), int(coverage["catalogue"])
            if played < MIN_COVERAGE:
                _add(self.notes, f"low_coverage:{played}/{total}")


def describe_reason(reason: str) -> str:
    """One reason in words, for the verdict line."""
    kind, _, rest = reason.partition(":")
    if kind == "unsafe":
        return _WORDS.get(rest, f"{rest} fails")
    if kind == "error":
        cid, _, why = rest.partition(":")
        return f"{cid} {why.replace('_', ' ')}"
    if kind == "tito-required":
        if rest == APPEND_REWRITE:
            return "history_rewrite diverges where a user or system message is appended (the token buffer refuses it)"
        if rest.startswith("suppressed:"):
            what = rest[11:]
            return f"{_WORDS.get(what, what + ' diverges')} (suppressed: needs the token buffer)"
        return f"{rest} diverges"
    if kind == "avoid":
        return f"avoid {_WORDS.get(rest, rest)}"
    if kind == "adapt":
        return f"needs {_WORDS.get(rest, rest)}"
    if kind == "low_coverage":
        played, _, total = rest.partition("/")
        if played == total:
            return f"{played} scenarios played, all the template allows (fewer than {MIN_COVERAGE}: a weaker verdict)"
        return f"only {played} of {total} scenarios played (fewer than {MIN_COVERAGE})"
    if kind == "not_probed" and rest == "thinking_modes":
        return "thinking modes not probed (the renderer's reasoning switches could not all be enumerated)"
    if kind == "not_probed":
        what, _, name = rest.partition(":")
        if what == "field":
            return f"message field {name!r} not probed (no probe render shows it)"
        if what == "count":
            return f"conversations longer than {name} messages or tool calls not probed (the template tests it)"
        if what == "length":
            return (
                f"texts longer than {name} characters not probed (the template tests it): past the longest derived "
                "text, or not in its long episode's first tool cycle"
            )
        if what == "parallel":
            return f"turns of more than {name} parallel calls not probed (the template may count them)"
        if what == "width":
            return (
                f"calls with {name} arguments, list items or nesting levels not probed (more such counts tested "
                "than one wide episode plays)"
            )
        if what == "literal":
            return (
                f"text holding {name!r} not probed (the template rewrites or looks for it; a control token's text, "
                "or past the eight a scenario plays)"
            )
        if what == "search":
            if name == "failed":
                return "the counterexample search failed (an error in tito-audit or a library, not the template)"
            why, _, sweep = name.partition(":")
            if why == "unjudged":
                return f"the search's sweep of {sweep} rendered but could not be judged (a turn starts inside a token)"
            if why == "pairs":
                return (
                    "the search's screen of pairs within one message stopped after its first candidates (more pairs "
                    "render otherwise once they are history, in a way that breaks nothing looked for)"
                )
            if why == "refused" and sweep == "pairs":
                return (
                    "the search's screen of pairs within one message could not run (the template refuses its "
                    "plainest episode, or rewrites it)"
                )
            if why == "refused":
                return (
                    f"the search's sweep of {sweep} was refused in part, and values it held were tried nowhere "
                    "(the template refuses a message they came in)"
                )
            drawn, _, budget = name.partition("/")
            return f"the counterexample search drew {drawn} of {budget} conversations (its render budget ran out)"
        if what == "mode":
            return f"thinking mode {name} not played (the template refused every scenario played in it)"
        if what == "switch":
            if "=" in name:
                return f"template switch {name} not played (the template refused it, or past the switch values played)"
            return f"template switch {name!r} not probed (no value it is tested against renders)"
        if what == "scenario":
            return f"scenario {name} not played (derived from what the template reads; the template refused it)"
        if what == "template_line":
            line, _, test = name.partition(": ")
            return f"template line {line} not exercised by any conversation played ({test})"
        if what == "template_lines":
            return f"{name.lstrip('+')} more template lines not exercised"
        if what == "replaces":
            return f"message field {name!r} not probed (it takes the place of what the turn says)"
        if what == "coverage":
            return f"which template lines ran was not measured ({COVERAGE_UNMEASURED.get(name, name)})"
        if what == "reasoning" and name in ("answers", "tool_calls"):
            where = "answers" if name == "answers" else "tool-call turns"
            return f"reasoning not probed on {where} (never shown there, and no delimiters to emit it in)"
        if what == "reasoning":
            return f"reasoning not probed ({name}: the probe does not render)"
        return f"{rest} not probed"
    return reason


# why template coverage was not measured (``audit.coverage``), in words
COVERAGE_UNMEASURED = {
    "renderer": "the renderer is not a Jinja template: its code cannot be instrumented",
    "not_compiled": "tito-audit's parse of the template's compiled code failed",
    "not_instrumented": "the template's compiled code does not take tito-audit's probes",
    "no_message_loop": "no loop over the messages found, so which arms history reaches cannot be told",
}
