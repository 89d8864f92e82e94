"""Context drift: where the context a loop trained under differs from the template's own rendering.

A loop may build its contexts another valid way (SkyRL renders each environment delta after a fixed base
conversation), or the engine rendered at another date than replay does. Its samples are then trained exactly
under the contexts the engine used (the TITO check passes), but those contexts are not what the same conversation
renders to when the model is deployed. That is worth a warning, never a divergence: the policy gradient is on
policy. ``drift`` aligns the loop's buffer (from the engine's prompts) with the template's buffer (rendered from
the messages, with the record's template kwargs and date) and names, per turn, the first place they differ.

A template that prints the render date gives drift of class ``date`` where only the date differs: the positions
where two renders of the episode's prompt at two dates differ (``date_positions``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from tito_audit.errors import RenderError
from tito_audit.rendering.renderer import Message, Renderer
from tito_audit.replay.compare import bos_of
from tito_audit.replay.divergence import Divergence, classify, run_text, window
from tito_audit.replay.id_diff import align

_OTHER_DAY = dt.timedelta(days=400, hours=7)  # another year, month, day and weekday


@dataclass
class Drift:
    divergences: list[Divergence] = field(default_factory=list)  # first per turn, in turn order
    tokens: int = 0  # ids of the loop's context that the template's rendering does not have


def date_positions(renderer: Renderer, messages: Sequence[Message], tools: list[dict] | None) -> range | None:
    """The ids of the prompt that change with the render date (None: the prompt does not show the date)."""
    try:
        now = renderer.render_ids(messages, tools=tools, add_generation_prompt=True)
        other = renderer.with_date(renderer.date + _OTHER_DAY).render_ids(
            messages, tools=tools, add_generation_prompt=True
        )
    except RenderError:
        return None
    changed = [(i1, i2) for tag, i1, i2, _j1, _j2 in align(now, other) if tag != "equal"]
    if not changed:
        return None
    return range(changed[0][0], max(i2 for _, i2 in changed) + 1)


def drift(
    template: Sequence[int],
    template_spans: Sequence[tuple[int, int]],
    loop: Sequence[int],
    *,
    decode: Callable[[Sequence[int]], str] | None,
    stop_ids: Sequence[int],
    special_ids: Sequence[int] = (),
    bos_id: int | None = None,
    bos_ids: Collection[int] = (),
    dates: range | None = None,
) -> Drift:
    """The loop's context (``loop``) against the template's buffer (``template``, sampled runs ``template_spans``).
    Each divergence's ``index`` is its position in the loop's buffer (the trained sequence of a correct loop)."""
    out = Drift()
    ends = [b for _, b in template_spans]
    first: dict[int, Divergence] = {}
    for tag, i1, i2, j1, j2 in align(template, loop):
        if tag == "equal":
            continue
        out.tokens += j2 - j1
        turn = min(sum(1 for e in ends if e <= i1), max(0, len(ends) - 1))
        if turn in first:
            continue
        r_ids, g_ids = list(template[i1:i2]), list(loop[j1:j2])
        texts = (run_text(decode, template, i1, i2), run_text(decode, loop, j1, j2)) if decode else None
        if dates is not None and i1 in dates and max(i1, i2 - 1) in dates:
            cls = "date"
        else:
            bos = bos_of(r_ids, g_ids, bos_id, bos_ids)
            cls = classify(r_ids, g_ids, texts=texts, stop_ids=stop_ids, special_ids=special_ids, bos_id=bos)
        what = (
            f"the loop's context has {texts[1][:40]!r} where the template renders {texts[0][:40]!r}"
            if texts
            else "the loop's context differs from the template's rendering"
        )
        _back, exp, act, start = window(template, loop, i1, j1)
        first[turn] = Divergence(turn, j1, cls, "drift", what, i1, exp, act, start, tokens=0)
    out.divergences = [first[k] for k in sorted(first)]
    return out
