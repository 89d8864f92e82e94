"""Roles beside user, assistant, tool and system that loops send (OpenAI's ``developer``), where a template names and
renders them.

A template may handle such a role (``{% elif message.role == 'developer' %}``) and rewrite the history while a
message of it is the last one, as it may for a system notice. Only a template that names the role and renders a
message of it mid-conversation is played with one: elsewhere it would be dropped or refused, and every conversation
holding one spent on nothing. The counterexample search draws them (``search.space``), and the append probes and the
endings that ``history_rewrite`` and ``naive_rerender`` judge append them (``checks.append_matrix``,
``episode_cuts``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from tito_audit.errors import RenderError
from tito_audit.scenarios.spec import Message

if TYPE_CHECKING:
    from tito_audit.audit.context import AuditContext

OTHER_ROLES: tuple[str, ...] = ("developer",)  # roles beside system that APIs send (OpenAI's instructions role)

_FOUND: WeakKeyDictionary[AuditContext, tuple[str, ...]] = WeakKeyDictionary()


def other_roles(ctx: AuditContext) -> tuple[str, ...]:
    """The roles of ``OTHER_ROLES`` that ``ctx``'s template names and renders after the first user turn (read once
    per audit)."""
    found = _FOUND.get(ctx)
    if found is None:
        found = _FOUND[ctx] = tuple(r for r in OTHER_ROLES if names_role(ctx, r) and renders(ctx, with_role(r)))
    return found


def notice_roles(ctx: AuditContext) -> tuple[str, ...]:
    """The roles a loop appends to say something, not to answer or to report a tool: a user turn, a system notice,
    and the template's ``other_roles`` (``history_rewrite`` judges their append probes, ``naive_rerender`` the
    episodes that end on one: ``episode_cuts.endings``)."""
    return ("user", "system", *other_roles(ctx))


def names_role(ctx: AuditContext, role: str) -> bool:
    """Whether the template's code holds ``role`` as a string literal (a role it compares a message's with)."""
    template = (ctx.model.chat_template or "") if ctx.engine.is_template else ""
    return f"'{role}'" in template or f'"{role}"' in template


def with_role(role: str) -> Callable[[list[Message]], list[Message]]:
    """The conversation with a ``role`` message after its first user turn (a reminder a loop injects)."""

    def form(messages: list[Message]) -> list[Message]:
        first = next((i for i, m in enumerate(messages) if m["role"] == "user"), None)
        if first is None:
            return messages
        return [*messages[: first + 1], {"role": role, "content": "Keep answers short."}, *messages[first + 1 :]]

    return form


def renders(ctx: AuditContext, form: Callable[[list[Message]], list[Message]]) -> bool:
    """Whether the template renders messages in ``form``: tried on the first catalogue conversation played that
    ``form`` changes (one render; a template that adds a result's content to text, or that allows one call a turn
    and no other number, raises), so that no conversation is spent on a form the template refuses."""
    for sim in ctx.simulations:
        if not sim.ok or (changed := form(sim.messages)) == sim.messages:
            continue
        try:
            ctx.renderer_for(sim.scenario).render(changed, tools=list(sim.scenario.tools))
        except RenderError:
            return False
        return True
    return False
