"""``read_keys``: the names a template reads as keys, which the search's sweep of repeated values sends."""

from __future__ import annotations

from jinja2.sandbox import ImmutableSandboxedEnvironment

from tito_audit.rendering.read_keys import MAX_KEYS, read_keys


def keys(source: str) -> tuple[str, ...]:
    return read_keys(ImmutableSandboxedEnvironment().parse(source))


def test_every_way_of_reading_a_key_is_read() -> None:
    source = (
        "{% for m in messages %}{% for tc in m.tool_calls %}"
        "{{ tc.function.arguments.file_path }}{{ tc.function.arguments['url'] }}{{ tc.function.arguments.get('cmd') }}"
        "{% endfor %}{% endfor %}"
        "{{ calls|selectattr('path', 'equalto', 'x')|map(attribute='note')|first }}{{ items|sort(attribute='rank') }}"
    )
    assert keys(source) == ("file_path", "url", "cmd", "note", "path", "rank")  # in the syntax tree's order


def test_the_formats_own_keys_methods_loop_and_namespace_attributes_are_left_out() -> None:
    source = (
        "{% set ns = namespace(found=false) %}{% for m in messages %}{% set ns.seen = loop.index %}"
        "{{ m.role }}{{ m.content.strip() }}{{ m['tool_calls'] }}{{ m.get('reasoning_content') }}"
        "{{ loop.last }}{{ ns.found }}{{ ns.seen }}{{ m.items() }}{{ m._private }}{{ m['a key'] }}{% endfor %}"
    )
    assert keys(source) == ()


def test_keys_are_kept_once_in_order_and_bounded() -> None:
    many = "".join(f"{{{{ a.k{i} }}}}{{{{ a.k{i} }}}}" for i in range(MAX_KEYS + 5))
    assert keys(many) == tuple(f"k{i}" for i in range(MAX_KEYS))
