"""A template's budget for one audit: the CPU its renders may spend, and how many may hit a limit, in all.

Each render is bounded (``guard.render_limits``: 2 s of CPU, a memory budget), but an audit renders a template a
few hundred times: a template that spends its whole limit on every render (two nested ``range(100000)`` loops),
or just under it, would hold an audit for minutes, as it held the audit for 329 s before this budget. ``scan``
stops such a template through its per-template deadline; ``audit``, ``fix``, ``table`` and ``replay`` through
this budget, which every renderer derived from one ``Renderer(...)`` shares. Once spent, every further render of
the template is refused at once (``RenderError`` of kind ``budget``) and the audit classifies the template
``limit_exceeded``: one line, exit 2 for that model, and the other models go on.

Render CPU is not all a render costs: its output is tokenized and compared afterwards, outside the render. A
template that renders a megabyte in 20 ms (``range(10000, 99999)|join``) spent 37-43 s of CPU and 3 GB in an
audit on that work before its 3 s of render CPU were spent; so the budget also counts the characters the renders
produce (``AUDIT_LIMITS``: 16,000,000). The renders of a whole audit of each bundled and shared model produce
0.12 to 0.42 MB (265 to 347 renders, 13.5 kB at most for one): the bound is about 40 such audits.

CPU time, as the per-render limit: a busy machine stretches wall time, not the CPU a render takes, so a loaded
machine does not change which templates are stopped. The total bounds the renders' CPU: each render's time limit
is what is left of it when that is less than the per-render limit. No real template comes near the defaults
(``guard.AUDIT_LIMITS``: 3 s of CPU, two renders past a limit): the renders of a whole audit of each bundled and
shared model take 0.01 to 0.11 s of CPU, and no corpus template hits a limit.
"""

from __future__ import annotations

from tito_audit.errors import RenderError

BUDGET_KIND = "budget"  # RenderError.kind of a render refused because its template's budget is spent
_LEAST_S = 0.01  # the shortest render limit worth arming: a budget with less left is spent


class TemplateBudget:
    """What one template has spent; ``stopped`` says why it may render no more (None while it may)."""

    __slots__ = ("cpu_seconds", "cpu_stop", "hits", "limit_hits", "output_chars", "produced", "spent", "stopped")

    def __init__(self, cpu_seconds: float, limit_hits: int, output_chars: int = 0) -> None:
        self.cpu_seconds = cpu_seconds  # 0: no total
        self.limit_hits = limit_hits  # 0: no count
        self.output_chars = output_chars  # 0: no total
        self.spent = 0.0
        self.hits = 0
        self.produced = 0
        self.stopped: str | None = None
        self.cpu_stop = False  # ``stopped`` is the CPU total's (``repay`` may lift it)

    def render_seconds(self, per_render: float) -> float:
        """The CPU time limit of the next render: the per-render limit, or what is left of the total when that is
        less (so the total is a bound, not a threshold that the render crossing it may overshoot by its whole
        limit)."""
        if not self.cpu_seconds:
            return per_render
        return min(per_render, max(self.cpu_seconds - self.spent, _LEAST_S))

    def charge(self, seconds: float, hit_limit: bool, chars: int = 0) -> None:
        """Count one render: its CPU seconds, whether it ran past its time or memory limit, and the characters it
        produced (the work its output causes after the render)."""
        self.spent += seconds
        self.hits += hit_limit
        self.produced += chars
        if self.stopped is not None:
            return
        if self.limit_hits and self.hits >= self.limit_hits:
            self.stopped = f"{self.hits} renders ran past their time or memory limit"
        elif self.cpu_seconds and self.spent >= self.cpu_seconds - _LEAST_S:
            self.stopped = f"its renders spent {self.cpu_seconds:g}s of CPU time"
            self.cpu_stop = True
        elif self.output_chars and self.produced > self.output_chars:
            self.stopped = f"its renders produced {self.produced:,} characters (over {self.output_chars:,} in all)"

    def lend(self, seconds: float, chars: int = 0) -> tuple[float, float, int, int]:
        """Raise the CPU total by ``seconds`` and the characters' total by ``chars`` (the counterexample search's
        own allowance, ``search.run``); the loan (the totals and the spending before it) for ``repay``. A total
        that is 0 (none) is not raised."""
        loan = (self.cpu_seconds, self.spent, self.output_chars, self.produced)
        if self.cpu_seconds:
            self.cpu_seconds += seconds
        if self.output_chars:
            self.output_chars += chars
        return loan

    def repay(self, loan: tuple[float, float, int, int], charged_chars: float = 0.0) -> None:
        """The totals as before the loan, the CPU total raised by what was spent under it (the renders after keep
        exactly the CPU that was left before it; a stop of the CPU total the loan's renders caused is lifted where
        that is not 0), and, where characters were lent, the characters' total raised by what the loan's renders
        produced past ``charged_chars`` (the share they are charged for: the renders after keep what they would
        have kept had the loan's renders produced no more than that)."""
        cap, spent, chars_cap, produced = loan
        if chars_cap and self.output_chars != chars_cap:
            self.output_chars = chars_cap + max(0, int(self.produced - produced - charged_chars))
        if not cap:
            return
        self.cpu_seconds = cap + (self.spent - spent)
        if self.cpu_stop and self.spent < self.cpu_seconds - _LEAST_S:
            self.stopped, self.cpu_stop = None, False

    def refusal(self) -> RenderError:
        return RenderError(BUDGET_KIND, f"template stopped: {self.stopped} (per-template budget)")
