"""Two facts under the scan's cost figures (docs/performance.md): what jinja's sandbox costs a render, and which CPU
clock can time code inside a render.

    python benchmarks/bench_render_floor.py [--name render-floor] [--repeats 2000]

1. The sandbox: the bundled Qwen3-0.6B's template, given one tool conversation (system, user, a call with its
   reasoning, the result, an answer) and its tool, rendered ``--repeats`` times by the compiled template
   transformers renders with (its sandboxed environment) and by the same source compiled in a plain jinja
   ``Environment`` with the same options (which tito-audit never renders an untrusted template in): microseconds a
   render, and that both give the same text.
2. The clocks: a fixed loop of Python arithmetic timed 300 times by the process and the thread CPU clocks, each read
   inside and outside an armed render time limit (``guard.time_limit``, ``ITIMER_PROF``), beside the wall clock.
Writes benchmarks/results/NAME.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import ENV, ROOT, machine, write

CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}
MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "reasoning_content": "I should call the tool.", "tool_calls": [CALL]},
    {"role": "tool", "content": "Sunny, 21 C."},
    {"role": "assistant", "content": "It is sunny."},
]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": {}}}]


def _per_render_us(template: Any, arguments: dict[str, Any], repeats: int) -> tuple[float, str]:
    out = template.render(**arguments)
    started = time.perf_counter()
    for _ in range(repeats):
        template.render(**arguments)
    return (time.perf_counter() - started) / repeats * 1e6, out


def sandbox(repeats: int) -> dict[str, Any]:
    import jinja2
    from jinja2.ext import loopcontrols

    from tito_audit.rendering.analysis import compiled_template
    from tito_audit.sources.load import load

    model = load("qwen3-0.6b", offline=True)
    source = model.tokenizer.chat_template
    sandboxed = compiled_template(source)
    plain_env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    plain_env.filters.update(sandboxed.environment.filters)
    plain_env.globals.update(sandboxed.environment.globals)
    plain = plain_env.from_string(source)
    arguments = dict(messages=MESSAGES, tools=TOOLS, add_generation_prompt=False, **model.tokenizer.special_tokens_map)
    sandboxed_us, sandboxed_text = _per_render_us(sandboxed, arguments, repeats)
    plain_us, plain_text = _per_render_us(plain, arguments, repeats)
    return {
        "template": "qwen3-0.6b (bundled)",
        "repeats": repeats,
        "sandboxed_us_per_render": round(sandboxed_us, 1),
        "plain_us_per_render": round(plain_us, 1),
        "sandbox_share": round(1 - plain_us / sandboxed_us, 3),
        "same_text": sandboxed_text == plain_text,
    }


def clocks(repeats: int = 300) -> dict[str, Any]:
    from tito_audit.rendering.guard import time_limit

    def work() -> int:
        total = 0
        for i in range(20000):
            total += i * i
        return total

    out: dict[str, Any] = {}
    for label, clock in (("process_time", time.process_time), ("thread_time", time.thread_time)):
        inside = outside = wall = 0.0
        for _ in range(repeats):
            before, wall_before = clock(), time.perf_counter()
            with time_limit(2.0):
                start = clock()
                work()
                inside += clock() - start
            outside += clock() - before
            wall += time.perf_counter() - wall_before
        out[label] = {
            "read_inside_limit_s": round(inside, 4),
            "read_outside_s": round(outside, 4),
            "wall_s": round(wall, 4),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="render-floor")
    parser.add_argument("--repeats", type=int, default=2000)
    args = parser.parse_args()
    os.environ.update({k: ENV[k] for k in ("HF_HUB_CACHE", "HF_HUB_OFFLINE", "TOKENIZERS_PARALLELISM")})
    sys.path.insert(0, str(ROOT))
    result = {
        "machine": machine(),
        "command": f"python benchmarks/bench_render_floor.py --name {args.name} --repeats {args.repeats}",
        "sandbox": sandbox(args.repeats),
        "clocks": clocks(),
    }
    write(args.name, result)
    print(result["sandbox"], result["clocks"])


if __name__ == "__main__":
    main()
