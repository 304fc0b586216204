"""Where the cold path's time goes (issue 18 item 13): one whole-request count with an empty cache.

    .venv/bin/python bench/cold_path.py

On the 100K-token thread of `bench/middleware_overhead.py` it times, median of runs:
- the cold count (new message objects, empty `TokenCounter`) and the same with the byte-class scan
  replaced by a constant (what the per-text bookkeeping costs without the scan);
- a reload count (new objects, warm counter), and `count_tokens_approximately` (the peers' chars/4);
- the scan (`text_features`) against a numpy version of it (class table lookup, `bincount`, run
  starts by `not_equal`) per text size: whether numpy is worth an optional fast path.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
from langchain_core.messages.utils import count_tokens_approximately

import ctxpress.tokens.estimate as estimate_module
from common import Reloader, build_thread
from ctxpress.compaction.content import content_text
from ctxpress.tokens import TokenCounter
from ctxpress.tokens import features as features_module

CLASS_TABLE = np.frombuffer(features_module.CLASS_TABLE, dtype=np.uint8)


def numpy_class_counts(text: str) -> tuple[Any, Any]:
    """Class counts and run-start counts of `text`: the bulk of `text_features`, in numpy."""
    classes = CLASS_TABLE[np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)]
    starts = np.empty(len(classes), dtype=bool)
    starts[0] = True
    np.not_equal(classes[1:], classes[:-1], out=starts[1:])
    return np.bincount(classes, minlength=256), np.bincount(classes[starts], minlength=256)


def main() -> None:
    thread = build_thread(100_000)
    reloader = Reloader(thread.messages)

    def cold() -> float:
        messages = reloader.load()
        start = time.perf_counter()
        TokenCounter().count_request(messages, thread.system, thread.tools, immutable_messages=True)
        return time.perf_counter() - start

    warm_counter = TokenCounter()
    warm_counter.count_request(reloader.load(), thread.system, thread.tools, immutable_messages=True)

    def reload() -> float:
        messages = reloader.load()
        start = time.perf_counter()
        warm_counter.count_request(messages, thread.system, thread.tools, immutable_messages=True)
        return time.perf_counter() - start

    def approx() -> float:
        messages = reloader.load()
        start = time.perf_counter()
        count_tokens_approximately(messages)
        return time.perf_counter() - start

    def without_scan() -> float:
        scan = estimate_module.text_features
        estimate_module.text_features = lambda text: (0,) * len(features_module.FEATURE_NAMES)
        try:
            return cold()
        finally:
            estimate_module.text_features = scan

    # Round-robin, so that a change in the machine's load falls on every figure alike.
    runs: dict[str, list[float]] = {"cold": [], "no scan": [], "reload": [], "approx": []}
    for _ in range(15):
        for name, run in (("cold", cold), ("no scan", without_scan), ("reload", reload), ("approx", approx)):
            runs[name].append(run())
    cold_ms, no_scan_ms, reload_ms, approx_ms = (statistics.median(runs[name]) * 1e3 for name in runs)
    print(f"thread: {len(thread.messages)} messages, {thread.tokens:,} estimated tokens")
    print(f"cold count {cold_ms:.2f} ms; without the byte-class scan {no_scan_ms:.2f} ms")
    print(f"reload count {reload_ms:.2f} ms; count_tokens_approximately {approx_ms:.2f} ms")
    print(f"cold / chars/4 {cold_ms / approx_ms:.1f}x; reload / chars/4 {reload_ms / approx_ms:.2f}x")

    texts = sorted({content_text(m.content) for m in thread.messages}, key=len)
    print("\n| text size | pure-Python scan µs | numpy µs | numpy speed-up |\n| --- | --- | --- | --- |")
    for text in (texts[len(texts) // 2], texts[int(len(texts) * 0.9)], texts[-1]):
        runs = 200
        start = time.perf_counter()
        for _ in range(runs):
            features_module.text_features(text)
        pure = (time.perf_counter() - start) / runs * 1e6
        start = time.perf_counter()
        for _ in range(runs):
            numpy_class_counts(text)
        vectorised = (time.perf_counter() - start) / runs * 1e6
        print(f"| {len(text):,} chars | {pure:.0f} | {vectorised:.0f} | {pure / vectorised:.2f}x |")


if __name__ == "__main__":
    main()
