r"""append_matrix: prefix preservation for appended user, system, tool and assistant messages, per thinking mode.

Each append is played after an answer and after a tool call, in every thinking mode the template has
(``enable_thinking=True/False``, default); so is a message of a role beside those (``developer``) where the
template names and renders one (``audit.other_roles``). The matrix is in the check's ``data``.

**Example** (``deepseek-ai/DeepSeek-V3``, ``append/system/after_answer[default]``, first divergent token 1): the
template hoists every system message to the top, so appending a system notice rewrites the whole conversation.

    buffered     0 '<｜begin▁of▁sentence｜>' | 128803 '<｜User｜>' 19923 'Hello' 128804 '<｜Assistant｜>'
    re-rendered  0 '<｜begin▁of▁sentence｜>' | 57275 'Notice' 28 ':' 366 ' be'

``Qwen/Qwen3-0.6B`` rewrites on user appends in every thinking mode: the previous answer's
``<think>\nGreet back...`` disappears (``rewrites on: user after answer [default]; user after call [default];
...``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

from tito_audit.audit.checks.base import check
from tito_audit.audit.collector import Collector
from tito_audit.audit.context import AuditContext
from tito_audit.audit.other_roles import other_roles
from tito_audit.errors import RenderError, detached
from tito_audit.report.findings import Outcome
from tito_audit.rollout.bridge import BridgeError, compute_bridge
from tito_audit.rollout.probes import APPEND_BASES, APPENDS, TOOLS


def _mode_name(mode: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in mode.items()) or "default"


@check(
    id="append_matrix",
    title="Other appends preserve the prefix",
    severity="warning",
    order=30,
    approximate_classes=True,
    explanation="""
Agent loops append more than tool results: user follow-ups, system notices, assistant prefills, in every
thinking mode the model is trained with. Each append whose render rewrites the existing history has no
correct token delta, so that kind of turn cannot be added to a token buffer.""",
    fix_hint="""
Avoid the failing (role, mode) combinations in rollouts, or patch the template so history rendering does not
depend on what follows (reasoning kept on every turn, no last-turn-only markers).""",
)
def append_matrix(ctx: AuditContext) -> Outcome:
    found = Collector(ctx, "append_matrix")
    cells: dict[str, dict[str, str]] = {}
    for probe in append_probes(ctx):
        row = cells.setdefault(probe.mode, {})
        if isinstance(probe.outcome, BridgeError):
            row[probe.cell] = "fail"
            found.compare(
                probe.scenario,
                probe.outcome.before,
                probe.outcome.after,
                f"appending {probe.role} {probe.base.replace('_', ' ')} rewrites the history ({probe.mode})",
            )
        elif isinstance(probe.outcome, RenderError):
            row[probe.cell] = "n/a"
            found.failed(probe.scenario, probe.outcome)
        else:
            row[probe.cell] = "pass"
            found.compared()
    fails = [f"{cell} [{mode}]" for mode, row in cells.items() for cell, v in row.items() if v == "fail"]
    summary = "every append preserves the prefix" if not fails else "rewrites on: " + "; ".join(fails[:4])
    return found.outcome(summary, "the template rejects every append probe", {"matrix": cells})


@dataclass(frozen=True)
class AppendProbe:
    """One append played on one base in one thinking mode: its outcome is None (the prefix holds), the
    ``BridgeError`` of a rewrite, or the ``RenderError`` of a template that refuses the append."""

    mode: str
    base: str
    role: str
    outcome: BridgeError | RenderError | None

    @property
    def cell(self) -> str:
        return f"{self.role} {self.base.replace('_', ' ')}"

    @property
    def scenario(self) -> str:
        return f"append/{self.role}/{self.base}[{self.mode}]"


# Each audit's probes, played once for both checks that read them (``append_matrix``, ``history_rewrite``)
_PLAYED: WeakKeyDictionary[AuditContext, list[AppendProbe]] = WeakKeyDictionary()


def append_probes(ctx: AuditContext, roles: tuple[str, ...] | None = None) -> list[AppendProbe]:
    """Each append of ``roles`` (``APPENDS``, and the template's ``other_roles``; every one by default) played after
    an answer and after a call (``APPEND_BASES``; a tool result after a call only), in every thinking mode
    (``history_rewrite`` reads all but the tool and assistant ones); played once per audit."""
    played = _PLAYED.get(ctx)
    if played is None:
        played = _PLAYED[ctx] = _play_probes(ctx)
    return [p for p in played if roles is None or p.role in roles]


def _play_probes(ctx: AuditContext) -> list[AppendProbe]:
    probes: list[AppendProbe] = []
    appends = {**APPENDS, **{r: [{"role": r, "content": "Notice: be brief."}] for r in other_roles(ctx)}}
    for mode in ctx.thinking_modes:
        renderer = ctx.renderer.with_kwargs(**mode) if mode else ctx.renderer
        for base_name, base in APPEND_BASES.items():
            for role, appended in appends.items():
                if base_name == "after_answer" and role == "tool":
                    continue
                outcome: BridgeError | RenderError | None = None
                try:
                    compute_bridge(
                        renderer,
                        base,
                        appended,
                        list(TOOLS),
                        ctx.stop_ids,
                        add_generation_prompt=role != "assistant",
                    )
                except (BridgeError, RenderError) as exc:
                    outcome = detached(exc)  # kept without its traceback, which holds this audit's frames
                probes.append(AppendProbe(_mode_name(mode), base_name, role, outcome))
    return probes
