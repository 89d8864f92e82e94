"""Patches (b) and (d): ``{% generation %}`` markers around what the model samples, stop token included.

transformers' ``return_assistant_tokens_mask`` marks the characters rendered inside ``{% generation %}``
blocks. The sampled text of an assistant turn starts where the generation prompt ends and stops just after
the stop token. We learn the header (what the generation prompt and the rendered turn share) by rendering
a probe, then walk the message loop as it runs for an assistant message, consuming the header from the
statically known pieces (literals, the role, special-token variables) and placing the block tags at the two
places, splitting an output or a string literal when a place lies inside one (``marker_walk`` plans the
places, ``output_split`` splits outputs). Where the walk passes code that other roles run too, the loop body is
specialised: an assistant-only copy carries the markers.

Markers that exist but leave the stop token outside (d) are removed first and placed again.
"""

from __future__ import annotations

from tito_audit.fix.marker_walk import plan_loop
from tito_audit.fix.output_split import split_output
from tito_audit.fix.patch import AuditedTemplate, Patch, Skip
from tito_audit.rendering.message_loop import loop_target, rendering_loops
from tito_audit.rendering.template_source import Block, Edit, Leaf, PatchError, Source, apply_edits, block_tag, walk
from tito_audit.rollout.probes import MARKER
from tito_audit.rollout.tokens import common_prefix_len

ID_MARKERS = "generation_markers"
ID_STOP = "stop_in_mask"


def header_text(audited: AuditedTemplate, template: str) -> str:
    """What the rendered assistant turn shares with the generation prompt (default template kwargs)."""
    from tito_audit.errors import RenderError

    renderer = audited.renderer(template)
    base = [{"role": "user", "content": "Hi"}]
    try:
        before = renderer.render(base)
        prompt = renderer.render(base, add_generation_prompt=True)
        full = renderer.render([*base, {"role": "assistant", "content": MARKER}])
    except RenderError as exc:
        raise PatchError(f"the probe conversation does not render: {exc.message}") from exc
    if not full.startswith(before) or MARKER not in full:
        raise PatchError("an assistant turn does not render after the history (the template reorders turns)")
    turn, gen = full[len(before) :], prompt[len(before) :] if prompt.startswith(before) else ""
    return turn[: common_prefix_len(gen, turn)]


def _loop_and_known(audited: AuditedTemplate, src: Source) -> tuple[Block, dict[str, str]]:
    loops = rendering_loops(src)
    if not loops:
        raise PatchError("no loop over the messages renders anything")
    loop = max(loops, key=lambda b: sum(1 for n in walk([b]) if isinstance(n, Leaf) and n.tag.kind == "var"))
    tok = audited.model.tokenizer
    known = {k: v for k, v in (tok.special_tokens_map or {}).items() if isinstance(v, str)}
    return loop, known


def plan_markers(audited: AuditedTemplate, src: Source) -> tuple[list[Edit], list[str], list[str]]:
    """Edits placing generation markers, one line per change, and caveats."""
    header = header_text(audited, src.text)
    loop, known = _loop_and_known(audited, src)
    plan = plan_loop(src, loop, header, audited.stop_texts, known)
    edits = list(plan.inserts)
    for start, cuts in plan.cuts.items():
        tag = next(t for t in src.tags if t.start == start)
        edits.append(Edit(tag.start, tag.end, split_output(src, tag, cuts)))
    changes = [f"assistant output starts after the header {header!r}"]
    caveats: list[str] = []
    if not plan.stop_found:
        caveats.append("the template renders no stop token inside the assistant turn: the mask cannot include one")
    else:
        changes.append(f"generation ends after the stop token {' / '.join(repr(s) for s in plan.stops)}")
    if plan.shared:
        edits = [_specialise(src, loop, edits)]
        changes.append(
            f"line {src.line(loop.first_tag.start)}: the loop body runs for every role, so an assistant-only copy "
            "carries the markers"
        )
    return edits, changes, caveats


def _role_expr(src: Source, loop: Block) -> str:
    names = loop_target(loop)
    if not names:
        raise PatchError("the message loop has no loop variable")
    name = names[0]
    return f"{name}['role']" if f"{name}['role']" in src.text and f"{name}.role" not in src.text else f"{name}.role"


def _specialise(src: Source, loop: Block, edits: list[Edit]) -> Edit:
    """``{% if <message>.role == 'assistant' %}<body with markers>{% else %}<body>{% endif %}``."""
    opener = loop.branches[0].tag
    closer = loop.branches[1].tag if len(loop.branches) > 1 else loop.end_tag
    a, b = opener.end, closer.start
    inner = [Edit(e.start - a, e.end - a, e.text, e.order) for e in edits if a <= e.start and e.end <= b]
    if len(inner) != len(edits):
        raise PatchError("markers would fall outside the message loop")
    body = src.text[a:b]
    marked = apply_edits(body, inner)
    right = opener.right
    left = closer.left
    return Edit(
        a,
        b,
        block_tag(f"if {_role_expr(src, loop)} == 'assistant'", "", right)
        + marked
        + block_tag("else", left, right)
        + body
        + block_tag("endif", left, ""),
    )


def strip_markers(src: Source) -> str:
    """The template without its generation tags (whitespace control kept with an empty comment if needed)."""
    edits = []
    for tag in src.tags:
        if tag.kind == "block" and tag.keyword in ("generation", "endgeneration"):
            before, after = src.text[: tag.start], src.text[tag.end :]
            line = before.rsplit("\n", 1)[-1]
            neutral = (
                (tag.left != "-" or not before[-1:].isspace())
                and (tag.left != "" or not line or line.strip(" \t") != "")  # lstrip_blocks has nothing to eat
                and (tag.right != "-" or not after[:1].isspace())
                and (tag.right != "" or not after.startswith("\n"))  # trim_blocks has nothing to eat
            )
            edits.append(Edit(tag.start, tag.end, "" if neutral else "{#" + tag.left + " " + tag.right + "#}"))
    return apply_edits(src.text, edits)


def propose(audited: AuditedTemplate, src: Source) -> Patch | Skip:
    check = next((c for c in audited.report.checks if c.id == "loss_mask"), None)
    if check is None or not check.active_findings:
        return Skip(ID_MARKERS, "generation markers are present and keep the stop token in the mask")
    stop_outside = any(f.cls == "stop_seam" for f in check.active_findings)
    patch_id = ID_STOP if stop_outside else ID_MARKERS
    try:
        base = Source(strip_markers(src)) if stop_outside else src
        edits, changes, caveats = plan_markers(audited, base)
    except PatchError as exc:
        return Skip(patch_id, f"cannot place generation markers: {exc}")
    if stop_outside:
        changes.insert(0, "existing {% generation %} markers removed (they left the stop token outside)")
    return Patch(
        id=patch_id,
        title="move the stop token into the generation markers"
        if stop_outside
        else "add {% generation %} markers around the assistant output",
        why=f"loss_mask: {check.summary}",
        template=apply_edits(base.text, edits),
        changes=changes,
        targets=("loss_mask",),
        required=False,
        caveats=caveats,
    )
