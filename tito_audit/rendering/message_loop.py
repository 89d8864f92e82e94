"""The loop over the conversation in a template's structure: the patches rewrite what it renders per message."""

from __future__ import annotations

from tito_audit.rendering.template_source import Block, Leaf, Source, top_level, walk


def has_output(block: Block) -> bool:
    return any(isinstance(node, Leaf) and node.tag.kind == "var" for node in walk([block]))


def message_loops(src: Source) -> list[Block]:
    """``for`` loops over the conversation: ``for message in messages``, ``for i in range(messages|length)``,
    or over a variable set from the messages (``loop_messages = messages[1:]``)."""
    aliases = {"messages"}
    for tag in src.tags:  # in source order, so chains of aliases resolve
        toks = tag.expr
        is_set = tag.keyword == "set" and len(toks) >= 3 and toks[0].kind == "name" and toks[1].value == "="
        if is_set and any(t.kind == "name" and t.value in aliases for t in toks[2:]):
            aliases.add(toks[0].value)
    loops = []
    for node in walk(src.tree):
        if isinstance(node, Block) and node.keyword == "for":
            expr = node.first_tag.expr
            at_in = next((i for i, t in top_level(expr) if t.kind == "name" and t.value == "in"), None)
            if at_in is not None and any(t.kind == "name" and t.value in aliases for t in expr[at_in + 1 :]):
                loops.append(node)
    return loops


def rendering_loops(src: Source) -> list[Block]:
    """Message loops that render something (the main loop); pre-scan loops only compute state."""
    return [b for b in message_loops(src) if has_output(b)]


def loop_target(block: Block) -> list[str]:
    expr = block.first_tag.expr
    names = []
    for _, t in top_level(expr):
        if t.kind == "name" and t.value == "in":
            break
        if t.kind == "name":
            names.append(t.value)
    return names
