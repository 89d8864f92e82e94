"""Pairs of values within one message: every name shape with every text core in one tool cycle, screened by text.

The sweeps and the draws put values into a conversation one at a time: each name shape meets a few text cores in a
result, never all of them. A template may rewrite an earlier message only where two of its values say something
together: a result whose tool name is dotted and whose content is digits alone (``tests/data/search/pairs/``). Met
as conversations, every name shape with every text core is some five hundred tool cycles, and each breaks only where
its pair is the one result of its append: thousands of renders of long episodes.

So each pair is screened first, by trial renders of one short episode (``episode``): a user turn, a call of that
name given that core, its result named so and holding it, an answer, a user turn and another answer. The whole
episode is rendered once, and so is the episode cut after the call turn (the model's turn as the loop renders it to
read the sample) and cut after the result (then history in the whole). A pair one of whose cuts' render is not
where the whole one begins, where the plainest pair's (``NAME_SHAPES[0]``, ``TEXTS[0]``) is, is a candidate: the
template renders that call or that result otherwise once it is history. The cut after the result is rendered
without the generation prompt, or with it (as the loop renders the prompt before the answer) where the template
refuses the plainest pair's so or does not keep it. A candidate is played as any conversation of the search is
(judged by tokens, shrunk, shown at its first divergent token): the screen only chooses what is played. A pair the
template refuses is one a loop cannot send it, and is skipped; where the template refuses the plainest pair's
episode, or keeps none of its cuts, no pair can be screened, and the search names it (``search:refused:pairs``).

The screen looks for re-render breaks (a rewrite of history that the buffer never sees), so it runs only where a
counterexample of that kind would move the verdict (a ``safe`` one). Its renders are trials
(``Renderer.render_trial``): charged to the template's budget, neither cached nor counted by template coverage.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from tito_audit.audit.search.accepted import trial_text
from tito_audit.audit.search.conversations import SHORT, SWEEP, declarations, placed
from tito_audit.audit.search.space import NAME_SHAPES, TEXTS, SearchSpace
from tito_audit.audit.search.sweep import sweep_turn
from tito_audit.scenarios.searched import Conversation, Message

if TYPE_CHECKING:
    from tito_audit.audit.context import AuditContext

UNSCREENED = "pairs"  # the name ``SearchResult.unplayed`` gives a screen that could not run
_CALL, _RESULT = 1, 2  # where an episode (``episode``) has its call turn and its result


def episode(space: SearchSpace, name: str, text: str, k: int = 0) -> Conversation:
    """The short episode of one pair: a call of ``name`` given ``text`` (and the ``k``-th argument value of the sweep
    of values), its result named ``name`` holding ``text``, then an answer, a user turn and another answer."""
    call = {
        "type": "function",
        "function": {"name": name, "arguments": {"query": text, "value": SWEEP[k % len(SWEEP)]}},
    }
    messages: list[Message] = [
        {"role": "user", "content": "What's the weather in Paris?"},
        *placed(sweep_turn(space, None, call), [text], [0]),
        sweep_turn(space, "It is sunny in Paris."),
        {"role": "user", "content": "Thanks. And tomorrow?"},
        sweep_turn(space, "Rain tomorrow.", k=1),
    ]
    return Conversation(tuple(messages), declarations(messages), ())


def pairs(space: SearchSpace) -> list[tuple[str, str]]:
    """Every name shape with every text core (cut to ``SHORT`` characters: the lengths a template tests are the
    sweep of texts'), name by name."""
    texts = list(dict.fromkeys(t[:SHORT] for t in space.texts))
    return [(name, text) for name in NAME_SHAPES for text in texts]


def screened(ctx: AuditContext, space: SearchSpace, check: Callable[[], None]) -> Iterator[Conversation] | None:
    """The candidates' episodes, in order (lazily: the first that breaks ends the screen), or None where no pair
    can be screened (see the module docstring). ``check`` is called before each pair (it raises to stop the
    screen: the search's allowance)."""
    text = trial_text(ctx)

    def kept(conversation: Conversation, cuts: Sequence[tuple[int, bool]]) -> list[bool | None]:
        """For each cut (its messages, and whether with the generation prompt): whether the episode's render up to
        it is where its whole render begins; None where either is refused."""
        whole = text(conversation, False)
        out: list[bool | None] = []
        for cut, agp in cuts:
            first = text(Conversation(conversation.messages[:cut], conversation.tools, ()), agp) if whole else None
            out.append(None if whole is None or first is None else whole.startswith(first))
        return out

    # the cuts the plainest pair's episode keeps: after the call turn, after its result (without the prompt first)
    call, result = _CALL + 1, _RESULT + 1
    keeps = kept(episode(space, NAME_SHAPES[0], TEXTS[0]), [(call, False), (result, False), (result, True)])
    cuts = [(call, False)] if keeps[0] else []
    cuts += [(result, agp) for agp, ok in ((False, keeps[1]), (True, keeps[2])) if ok][:1]
    if not cuts:
        return None

    def candidates() -> Iterator[Conversation]:
        for k, (name, core) in enumerate(pairs(space)):
            check()
            candidate = episode(space, name, core, k)
            if False in kept(candidate, cuts):
                yield candidate

    return candidates()
