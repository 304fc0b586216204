"""Resident memory of ctxpress over 10,000 model calls on a real thread: no unbounded growth
(issue "Benchmarks side by side with the peers, on real conversations", goal 4).

    .venv/bin/python bench/memory.py           # 10,000 calls, updates docs/benchmarks.md
    .venv/bin/python bench/memory.py --quick   # 2,000 calls, docs untouched

The thread: about 100K estimated tokens concatenated from real traces (`common.build_thread`).
Call i sends a prefix of it -- lengths cycle from 60% to 100% of the messages, cut before an AI
message as a real request is -- with the threshold midway between the whole thread and its L1
view: short prefixes go below the threshold, long ones through L1 (which brings every prefix
under it, so no summary is needed). Every call gets new message objects with new strings, decoded
from JSON as a checkpoint reload gives them. The middleware uses its default caches (a token counter
and an L1 cache of its own) and one workdir, as one long conversation in one worker would.

RSS (VmRSS of /proc/self/status) is printed every 1,000 calls. Verdict: bounded when RSS after the
last call is within `GROWTH_LIMIT_MB` of RSS after the first 20% of the calls (warm-up: the caches
fill, the allocator reaches its working set).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from langchain.agents.middleware.types import ExtendedModelResponse
from langchain_core.messages import AIMessage, messages_from_dict, messages_to_dict

from common import (
    InstantChatModel,
    bench_parser,
    build_thread,
    canned_handler,
    make_ours,
    model_request,
    rss_mb,
    settle,
    table,
    update_docs,
)
from ctxpress.compaction import compact_view
from ctxpress.config import CompressionConfig
from ctxpress.tokens import count_request_tokens
from ctxpress.workdir import LocalWorkdir

MARKER = "memory"
COMMAND = ".venv/bin/python bench/memory.py"
THREAD_TOKENS = 100_000
CALLS, QUICK_CALLS = 10_000, 2_000
EVERY = 1_000
WARMUP_SHARE = 0.2  # the first 20% of the calls fill the caches
GROWTH_LIMIT_MB = 5.0
SHORTEST_SHARE = 0.6
PREFIXES = 40  # distinct prefix lengths in the cycle


def main(argv: list[str] | None = None) -> None:
    parser = bench_parser(__doc__, f"{QUICK_CALLS:,} calls; no docs update")
    args = parser.parse_args(argv)
    calls = QUICK_CALLS if args.quick else CALLS

    thread = build_thread(THREAD_TOKENS)
    records = [json.dumps(item, ensure_ascii=False) for item in messages_to_dict(thread.messages)]
    ends = [
        i
        for i, m in enumerate(thread.messages)
        if isinstance(m, AIMessage) and i >= SHORTEST_SHARE * len(records)
    ]
    step = max(1, len(ends) // PREFIXES)
    lengths = [*ends[::step], len(records)]
    model = InstantChatModel()

    with tempfile.TemporaryDirectory(prefix="ctxpress-memory-") as scratch:
        raw = thread.tokens
        view = compact_view(thread.messages, CompressionConfig(), LocalWorkdir(Path(scratch) / "probe"))
        threshold = (raw + count_request_tokens(view.messages, thread.system, thread.tools)) // 2
        middleware = make_ours(threshold, LocalWorkdir(Path(scratch) / "workdir"), model)  # its own caches
        counter, l1_cache = middleware.token_counter, middleware.compaction_cache
        del view
        settle()
        info = counter.cache_info()
        samples: list[tuple[int, float, int, int, int, float]] = [
            (0, rss_mb(), info["entries"], info["messages"], len(l1_cache), 0.0)
        ]
        l1_calls = 0
        in_middleware = 0.0
        started = time.perf_counter()
        for index in range(1, calls + 1):
            length = lengths[index % len(lengths)]
            # New objects and new strings, as a checkpoint reload gives them.
            messages = messages_from_dict([json.loads(record) for record in records[:length]])
            request = model_request(model, messages, thread.system, thread.tools)
            before = counter.count_request(messages, thread.system, thread.tools)
            call_started = time.perf_counter()
            response = middleware.wrap_model_call(request, canned_handler)
            in_middleware += time.perf_counter() - call_started
            if isinstance(response, ExtendedModelResponse):
                raise SystemExit("a summary was made: the threshold choice is wrong for this thread")
            l1_calls += before >= threshold
            if index % EVERY == 0:
                info = counter.cache_info()
                samples.append(
                    (
                        index,
                        rss_mb(),
                        info["entries"],
                        info["messages"],
                        len(l1_cache),
                        time.perf_counter() - started,
                    )
                )
                print(
                    f"{index:>6} calls: RSS {samples[-1][1]:.1f} MB, token cache {info['entries']:,} entries, "
                    f"message memo {info['messages']:,}, L1 cache {len(l1_cache):,} entries",
                    flush=True,
                )

    warm = next(s for s in samples if s[0] >= WARMUP_SHARE * calls)
    growth = samples[-1][1] - warm[1]
    bounded = growth <= GROWTH_LIMIT_MB
    verdict = (
        f"**Bounded**: RSS grew {growth:+.1f} MB from call {warm[0]:,} to call {samples[-1][0]:,} "
        f"(limit {GROWTH_LIMIT_MB:g} MB)."
        if bounded
        else f"**Growing**: RSS grew {growth:+.1f} MB from call {warm[0]:,} to call {samples[-1][0]:,} "
        f"({growth / max(1, (samples[-1][0] - warm[0]) / 1000):.2f} MB per 1,000 calls; limit {GROWTH_LIMIT_MB:g} MB)."
    )
    lines = [
        "## Memory over many calls",
        "",
        f"Reproduce: `{COMMAND}` (`--quick`: {QUICK_CALLS:,} calls). {calls:,} calls of ctxpress' "
        f"`wrap_model_call` on prefixes of a real {len(records)}-message thread ({raw:,} estimated tokens, "
        "concatenated from the traces): prefix lengths cycle over 60-100% of the thread, the threshold "
        f"({threshold:,} tokens) sits midway between the whole thread and its L1 view, so "
        f"{l1_calls:,} calls went through L1 and {calls - l1_calls:,} below the threshold, never a summary. "
        "Each call gets new message objects decoded from JSON (a checkpoint reload); default "
        f"process-wide caches, one workdir. The middleware took {1000 * in_middleware / calls:.2f} ms per call "
        "on average (the rest of the elapsed time is decoding the messages).",
        "",
        *table(
            [
                "calls",
                "RSS MB",
                "token cache entries",
                "message memo entries",
                "L1 cache entries",
                "elapsed s",
            ],
            (
                [f"{n:,}", f"{rss:.1f}", f"{entries:,}", f"{memo:,}", f"{l1:,}", f"{t:.0f}"]
                for n, rss, entries, memo, l1, t in samples
            ),
        ),
        "",
        verdict,
    ]
    print("\n".join(lines))
    if not (args.quick or args.no_docs):
        update_docs(MARKER, lines)


if __name__ == "__main__":
    main()
