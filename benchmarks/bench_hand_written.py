"""Two small hand-written pieces against the libraries that could replace them, on the work they do here.

    python benchmarks/bench_hand_written.py      # -> benchmarks/results/hand-written.json

1. ``rendering/literal_pattern.any_of`` (a regex written as a trie) against the pattern transformers builds (every
   token escaped, joined longest first) and against pyahocorasick's automaton (``iter_long``: leftmost-longest,
   the same matches), finding every added or control token in a text. Two vocabularies: one tokenizer's added
   tokens (bundled Qwen3-0.6B: 26), and what a scan's synthesized base carries (Mistral-Nemo's 1,000 added tokens
   plus every control-token literal of the 786 corpus templates). The texts are the corpus templates themselves:
   strings of a few kB dense with control tokens, as renders are. Every method must find the same spans, else the
   run stops.
2. ``rendering/bounded_cache.BoundedCache`` against ``functools.lru_cache`` and cachetools' ``LRUCache`` and
   ``FIFOCache`` (weighted, ``getsizeof``), on a memo's traffic: content keys of messages (marshal bytes, as
   ``by_content`` makes them); a stream of hits, and a stream over more distinct keys than the bound.

Times are the best of several repeats of ``time.perf_counter`` in this one process (the machine is shared; the
best repeat is the least disturbed); ratios compare methods run side by side.
"""

from __future__ import annotations

import functools
import marshal
import random
import re
import time
from collections.abc import Callable
from typing import Any

import ahocorasick
import cachetools
from measure import ROOT, SHARED, machine, write

from tito_audit.rendering.bounded_cache import BoundedCache
from tito_audit.rendering.literal_pattern import _any_of
from tito_audit.sources.control_tokens import control_literals

REPEATS = 5
trie_pattern = _any_of.__wrapped__  # any_of without its memo, so that building is timed


def best(fn: Callable[[], Any], repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def alternation(words: list[str]) -> re.Pattern[str]:
    """transformers' ``_get_control_token_patterns`` (its first pattern)."""
    return re.compile("|".join(map(re.escape, sorted(words, key=len, reverse=True))) or "(?!)")


def automaton(words: list[str]) -> Any:
    a = ahocorasick.Automaton()
    for w in words:
        a.add_word(w, len(w))
    a.make_automaton()
    return a


def spans_re(pattern: re.Pattern[str], texts: list[str]) -> list[list[tuple[int, int]]]:
    return [[m.span() for m in pattern.finditer(t)] for t in texts]


def spans_aho(a: Any, texts: list[str]) -> list[list[tuple[int, int]]]:
    return [[(end - n + 1, end + 1) for end, n in a.iter_long(t)] for t in texts]


def literal_patterns(texts: list[str], vocabularies: dict[str, list[str]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, words in vocabularies.items():
        build = {
            "trie (any_of)": lambda w=words: trie_pattern(frozenset(w)),
            "alternation (transformers)": lambda w=words: alternation(w),
            "pyahocorasick": lambda w=words: automaton(w),
        }
        built = {k: f() for k, f in build.items()}
        trie, plain, aho = built["trie (any_of)"], built["alternation (transformers)"], built["pyahocorasick"]
        found: dict[str, Callable[[], list[list[tuple[int, int]]]]] = {
            "trie (any_of)": functools.partial(spans_re, trie, texts),
            "alternation (transformers)": functools.partial(spans_re, plain, texts),
            "pyahocorasick": functools.partial(spans_aho, aho, texts),
        }
        reference = found["alternation (transformers)"]()
        for method, f in found.items():
            if f() != reference:
                raise SystemExit(f"{method} finds other spans than the alternation on {name}")
        search_s = {k: best(f) for k, f in found.items()}
        build_s = {k: best(f, 3) for k, f in build.items()}
        fastest = search_s["trie (any_of)"]
        out[name] = {
            "words": len(words),
            "texts": len(texts),
            "characters": sum(map(len, texts)),
            "matches": sum(map(len, reference)),
            "search_seconds": {k: round(v, 5) for k, v in search_s.items()},
            "build_seconds": {k: round(v, 5) for k, v in build_s.items()},
            "search_time_vs_trie": {k: round(v / fastest, 2) for k, v in search_s.items()},
        }
    return out


def caches(messages: list[Any], lookups: int = 200_000, limit: int = 4096) -> dict[str, Any]:
    """Each memo answers the same streams of lookups, computing a miss with the same cheap function, under the same
    bound of ``limit`` entries (the weights here are far below the weight budget; cachetools takes one bound, so
    each entry weighs at least budget / limit there, which bounds both). Two streams: ``hits`` (every key already
    kept: the path a warm audit takes) and ``churn`` (80% from a hot set that fits, 20% from a cold tail that does
    not, so that the eviction policy shows); seconds per lookup and the hit rate reached."""
    rng = random.Random(0)
    keys = [marshal.dumps(m, 2) for m in messages]
    hot, cold = keys[: limit // 2], keys[limit // 2 :]
    streams = {
        "hits": [rng.choice(hot) for _ in range(lookups)],
        "churn": [rng.choice(hot) if rng.random() < 0.8 else rng.choice(cold) for _ in range(lookups)],
    }
    budget = 4_000_000

    def compute(key: bytes) -> int:
        return len(key)

    def bounded(stream: list[bytes]) -> float:
        c = BoundedCache(limit, budget)
        for k in hot:
            c.put(k, compute(k), len(k))
        misses = 0
        for k in stream:
            hit = c.get(k)
            if hit is None:
                misses += 1
                hit = c.put(k, compute(k), len(k))
        return 1 - misses / len(stream)

    def lru_cache(stream: list[bytes]) -> float:
        f = functools.lru_cache(maxsize=limit)(compute)  # bounds entries only, never their weight
        for k in hot:
            f(k)
        f.cache_info()
        before = f.cache_info()
        for k in stream:
            f(k)
        info = f.cache_info()
        return (info.hits - before.hits) / len(stream)

    def weighted(kind: type) -> Callable[[list[bytes]], float]:
        def run(stream: list[bytes]) -> float:
            c = kind(maxsize=budget, getsizeof=lambda v: max(v[1], budget // limit))
            for k in hot:
                c[k] = (compute(k), len(k))
            misses = 0
            for k in stream:
                hit = c.get(k)
                if hit is None:
                    misses += 1
                    hit = (compute(k), len(k))
                    c[k] = hit
            return 1 - misses / len(stream)

        return run

    methods: dict[str, Callable[[list[bytes]], float]] = {
        "BoundedCache": bounded,
        "functools.lru_cache (entry bound only)": lru_cache,
        "cachetools.LRUCache": weighted(cachetools.LRUCache),
        "cachetools.FIFOCache": weighted(cachetools.FIFOCache),
    }
    out: dict[str, Any] = {"lookups": lookups, "limit_entries": limit}
    for name, stream in streams.items():
        hit_rates = {k: round(f(stream), 4) for k, f in methods.items()}
        seconds = {k: best(functools.partial(f, stream)) for k, f in methods.items()}
        ours = seconds["BoundedCache"]
        out[name] = {
            "distinct_keys": len(set(stream)),
            "nanoseconds_per_lookup": {k: round(v / lookups * 1e9) for k, v in seconds.items()},
            "time_vs_bounded_cache": {k: round(v / ours, 2) for k, v in seconds.items()},
            "hit_rate": hit_rates,
        }
    return out


def main() -> None:
    from tito_audit import load

    corpus = sorted((ROOT / SHARED / "template-corpus").glob("*.jinja"))
    texts = [p.read_text(encoding="utf-8") for p in corpus]
    qwen3 = sorted(load("qwen3-0.6b").tokenizer.added_tokens_encoder)
    mistral = set(load("mistral-nemo-instruct-2407").tokenizer.added_tokens_encoder)
    literals = sorted({w for t in texts for w in control_literals(t)} | mistral)
    vocabularies = {
        "one tokenizer (qwen3-0.6b's added tokens)": qwen3,
        "a synthesized base (mistral-nemo's added tokens and the corpus' control literals)": literals,
    }
    rng = random.Random(1)
    roles = ["user", "assistant", "tool"]
    messages = [
        {"role": rng.choice(roles), "content": " ".join(rng.choices(texts[i % 50].split(), k=40))}
        for i in range(12_000)
    ]
    result = {
        "machine": machine(),
        "literal_pattern": literal_patterns(texts, vocabularies),
        "bounded_cache": caches(messages),
    }
    print(write("hand-written", result))


if __name__ == "__main__":
    main()
