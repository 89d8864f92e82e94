"""What one counterexample search did, as the report says it (``scenarios.search``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tito_audit.audit.search.property import Played
from tito_audit.scenarios.searched import Conversation


@dataclass
class SearchResult:
    """What one search did. ``budget``/``seed``: as asked; ``wanted``: the kinds it looked for (``property.KINDS``,
    none when it did not run: ``skipped`` says why); ``drawn``: conversations drawn before the first counterexample
    (at most ``budget``; hypothesis may draw one twice), ``rendered``: of the distinct ones, those the template
    rendered; ``plays``: conversations played, shrinking included (each once); ``found``:
    the shrunk counterexamples, strongest kind first."""

    budget: int
    seed: int
    wanted: tuple[str, ...] = ()
    drawn: int = 0
    rendered: int = 0
    plays: int = 0
    found: list[Played] = field(default_factory=list)
    skipped: str | None = None
    stopped: str | None = None  # why the search stopped before its budget (its own render budget ran out)
    # why a shrink stopped before its bound (the search's CPU budget, which a loaded machine spends sooner): the
    # counterexample is real, but may not be the smallest, nor the one another machine reports
    shrink_stopped: str | None = None
    # the sweeps (``sweep.SWEEP_NAMES``) the template rendered but no comparison could judge: a turn's first token
    # spans the prompt and the turn (stop_boundary's seam), so no sample of it is canonical
    unjudged: tuple[str, ...] = ()
    # the sweeps the template refused whole: how many of each one's blocks it accepted only in their plainest form
    # (``reshaped``) and how many it refused in both (``dropped``; the rest, ``accepted``, was played in its place);
    # and those a dropped block of which held a text or value no conversation played holds (tried nowhere)
    refused: dict[str, dict[str, int]] = field(default_factory=dict)
    unplayed: tuple[str, ...] = ()
    # the screen of pairs within one message (``pairs``), where it ran: the pairs screened, the candidates played,
    # and ``stopped`` where it played ``pairs.MAX_CANDIDATES`` and stopped (named: ``search:pairs:stopped``)
    pairs: dict[str, int] = field(default_factory=dict)

    def not_probed(self) -> list[str]:
        """``search:WHY`` where the search ran short of what was asked (it failed, or its own render budget stopped
        it before it drew ``budget`` conversations), ``search:unjudged:SWEEP`` for each sweep it could not judge
        ``search:refused:SWEEP`` for each whose refused blocks held a value tried nowhere, and ``search:pairs:stopped``
        where the screen of pairs stopped before its end (before a counterexample was found):
        the verdict then rests on less than it claims. Nothing otherwise (a search turned off, or not needed, is
        said in ``summary`` and is no gap: off is the user's choice)."""
        if self.skipped is not None and self.skipped.startswith("error"):
            return ["search:failed"]
        out = [f"search:unjudged:{name}" for name in self.unjudged] if not self.found else []
        out += [f"search:refused:{name}" for name in self.unplayed] if not self.found else []
        out += ["search:pairs:stopped"] if self.pairs.get("stopped") and not self.found else []
        if self.stopped is not None and not self.found and self.drawn < self.budget:
            out.insert(0, f"search:{self.drawn}/{self.budget}")
        return out

    def summary(self) -> dict[str, Any]:
        """The report's ``scenarios.search``."""
        out: dict[str, Any] = {"budget": self.budget, "seed": self.seed}
        if self.skipped is not None:
            out["skipped"] = self.skipped
            return out
        out.update(
            looked_for=list(self.wanted),
            drawn=self.drawn,
            rendered=self.rendered,
            plays=self.plays,
            **({"unjudged": list(self.unjudged)} if self.unjudged else {}),
            **({"refused": self.refused} if self.refused else {}),
            **({"pairs": self.pairs} if self.pairs else {}),
            **({"stopped": self.stopped} if self.stopped else {}),
            **({"shrink_stopped": self.shrink_stopped} if self.shrink_stopped else {}),
            counterexamples=[
                {
                    "scenario": sim.scenario.id,
                    "kind": p.kind,
                    "conversation": sim.scenario.description,
                    **Conversation(sim.scenario.messages, sim.scenario.tools, sim.scenario.template_kwargs).as_dict(),
                }
                for p in self.found
                for sim in (p.simulation,)
            ],
        )
        return out
