"""Where the cold path's time goes (issue 18 item 13): one whole-request count with an empty cache.

    .venv/bin/python bench/cold_path.py

On the 100K-token thread of `bench/middleware_overhead.py` it times, round-robin, median of runs:
- the cold count (new message objects, fresh `TokenCounter`) as installed (the C walk where the
  extension was built), without the C scan (numpy's batch scan when numpy is there), with neither
  (the pure-Python fallback), and without the C scan with every text "estimated" by `len()` (the
  Python path's per-message and per-text bookkeeping alone);
- a reload count (new objects, warm counter), `count_tokens_approximately` (the peers' chars/4) and
  the UTF-8 encoding of every string content (the scan's first step);
- the scan of the first count's texts: per text (pure) against numpy's batch
  (`features_batch.texts_features` without the C scan) and the C scan per text;
- per text size, the pure class counts against numpy's whole-buffer ones: where
  `features.NUMPY_MIN_BYTES` should sit.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

from langchain_core.messages import BaseMessage
from langchain_core.messages.utils import count_tokens_approximately

from common import Reloader, Thread, build_thread
from ctxpress.tokens import TokenCounter, features_batch
from ctxpress.tokens import features as features_module
from ctxpress.tokens.class_counts import NUMPY_CLASS_COUNTS, pure_class_counts
from ctxpress.tokens.features import features_of
from middleware_overhead import cold_count
from scans import scan_paths

RUNS = 15


def encode_contents(messages: list[BaseMessage]) -> None:
    for message in messages:
        if isinstance(message.content, str):
            message.content.encode("utf-8", "surrogatepass")


def median_ms(call: Callable[[], object], runs: int = RUNS) -> float:
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds) * 1e3


def first_count_texts(thread: Thread, reloader: Reloader) -> list[str]:
    """The texts a first count of the thread estimates in its batch."""
    counter = TokenCounter()
    cache = counter._caches("default")[0]
    batches: list[list[str]] = []
    count_texts = cache.count_texts
    assert count_texts is not None

    def recording(texts: Sequence[str]) -> list[int]:
        batches.append(list(texts))
        return count_texts(texts)

    cache.count_texts = recording
    counter.count_request(reloader.load(), thread.system, thread.tools, immutable_messages=True)
    return [text for batch in batches for text in batch]


def main() -> None:
    thread = build_thread(100_000)
    reloader = Reloader(thread.messages)
    warm_counter = TokenCounter()
    warm_counter.count_request(reloader.load(), thread.system, thread.tools, immutable_messages=True)

    def reload(messages: list[BaseMessage]) -> Callable[[], object]:
        return lambda: warm_counter.count_request(
            messages, thread.system, thread.tools, immutable_messages=True
        )

    cases: dict[str, Callable[[list[BaseMessage]], Callable[[], object]]] = {
        "cold": lambda messages: cold_count(thread, messages, "installed"),
        "cold, without the C scan": lambda messages: cold_count(thread, messages, "numpy"),
        "cold, pure fallback": lambda messages: cold_count(thread, messages, "pure"),
        "cold, len() for the scan": lambda messages: cold_count(thread, messages, "len"),
        "reload": reload,
        "count_tokens_approximately": lambda messages: lambda: count_tokens_approximately(messages),
        "encode contents to UTF-8": lambda messages: lambda: encode_contents(messages),
    }
    # Round-robin on fresh objects, so that a change in the machine's load falls on every figure alike.
    seconds: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(RUNS):
        for name, setup in cases.items():
            call = setup(reloader.load())
            start = time.perf_counter()
            call()
            seconds[name].append(time.perf_counter() - start)
    approx = statistics.median(seconds["count_tokens_approximately"])
    print(
        f"thread: {len(thread.messages)} messages, {thread.tokens:,} estimated tokens; numpy: "
        f"{'yes' if features_batch.NUMPY_TEXTS_FEATURES else 'no'}; C scan: "
        f"{'yes' if features_module.COMPILED_SCAN else 'no'}\n"
    )
    print("| count | p50 ms | ÷ chars/4 |\n| --- | --- | --- |")
    for name, values in seconds.items():
        value = statistics.median(values)
        print(f"| {name} | {value * 1e3:.3f} | {value / approx:.2f}× |")

    with scan_paths("numpy"):  # the batch prefetch that gathers them runs without the C walk
        texts = first_count_texts(thread, reloader)
    pure_ms = median_ms(
        lambda: [features_of(t, t.encode("utf-8", "surrogatepass"), pure_class_counts) for t in texts]
    )
    with scan_paths("numpy"):
        batch_ms = median_ms(lambda: features_batch.texts_features(texts))
    compiled = features_module.COMPILED_SCAN
    compiled_line = ""
    if compiled is not None:
        compiled_ms = median_ms(lambda: [compiled.features(t) for t in texts])
        compiled_line = f", the C scan per text {compiled_ms:.3f} ms ({pure_ms / compiled_ms:.1f}× faster)"
    print(
        f"\nthe first count's {len(texts)} texts ({sum(map(len, texts)):,} characters): pure scan per text "
        f"{pure_ms:.3f} ms, numpy's batch (`texts_features` without the C scan) {batch_ms:.3f} ms "
        f"({pure_ms / batch_ms:.2f}× faster){compiled_line}"
    )

    if NUMPY_CLASS_COUNTS is None:
        return
    numpy_counts = NUMPY_CLASS_COUNTS
    ordered = sorted(set(texts), key=len)
    print("\n| text size | pure class counts µs | numpy µs | numpy speed-up |\n| --- | --- | --- | --- |")
    for text in (
        ordered[len(ordered) // 2],
        ordered[int(len(ordered) * 0.9)],
        ordered[int(len(ordered) * 0.98)],
        ordered[-1],
    ):
        data = text.encode("utf-8", "surrogatepass")
        runs = 200
        pure = median_ms(lambda: features_of(text, data, pure_class_counts), runs) * 1e3  # noqa: B023
        vectorised = median_ms(lambda: features_of(text, data, numpy_counts), runs) * 1e3  # noqa: B023
        print(f"| {len(data):,} bytes | {pure:.0f} | {vectorised:.0f} | {pure / vectorised:.2f}× |")


if __name__ == "__main__":
    main()
