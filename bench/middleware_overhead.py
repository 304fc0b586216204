"""Per-model-call overhead of ctxpress and its peers, the model excluded (issue "Benchmarks side by
side with the peers, on real conversations", goal 1).

    .venv/bin/python bench/middleware_overhead.py            # full run, updates docs/benchmarks.md
    .venv/bin/python bench/middleware_overhead.py --quick    # fewer runs, docs untouched
    .venv/bin/python bench/middleware_overhead.py --profile  # also cProfile ctxpress' below path

The model is a canned `ModelResponse`: ctxpress and DeepAgents get `wrap_model_call(request,
handler)`; LangChain's `SummarizationMiddleware` acts in `before_model`, so that is what it gets.
Summaries come from an instant fake model. Threads of about 10K, 100K and 400K estimated tokens
are concatenated from real traces (`common.build_thread`), provider-valid.

Paths, each timed round-robin across the three middlewares on the same request:
- below threshold: cold (new message objects, empty token cache), reload (new message objects,
  warm cache: a checkpoint read by another serializer between two runs), next run (the next
  run's first call, its checkpoint read through the ctxpress `CheckpointSerializer` that read and
  wrote the previous run's: `common.NextRun`), warm (the same objects again: the next call of the
  same run);
- L1: the threshold midway between the thread and its L1 view, so L1 alone brings it under; first
  pass (new workdir, new L1 cache: hashing, previews, writes) and repeated pass (same history);
- L2: the threshold at half the L1 view, so a summary is needed (instant fake summary model).
The peers get the same threshold in tokens, counted their way (chars/4); the table says what each
did with the request (below / summarised).

Goal: below threshold, ctxpress takes at most 0.5x DeepAgents' time on the same request.
"""

from __future__ import annotations

import cProfile
import io
import platform
import pstats
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from langchain.agents.middleware.types import ExtendedModelResponse
from langchain_core.messages import BaseMessage
from langchain_core.messages.utils import count_tokens_approximately
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.runtime import Runtime

from common import (
    InstantChatModel,
    NextRun,
    Reloader,
    Thread,
    Timing,
    bench_parser,
    build_thread,
    canned_handler,
    make_deepagents,
    make_langchain,
    make_ours,
    model_request,
    ratio,
    reference_thread,
    settle,
    table,
    time_interleaved,
    update_docs,
)
from ctxpress.checkpoint_serde import CheckpointSerializer
from ctxpress.compaction import CompactionCache, compact_view
from ctxpress.config import CompressionConfig
from ctxpress.tokens import TokenCounter, count_request_tokens
from ctxpress.tokens.message_memo import message_fields
from ctxpress.workdir import LocalWorkdir
from scans import scan_paths

MARKER = "overhead"
COMMAND = ".venv/bin/python bench/middleware_overhead.py"
# Below threshold, ctxpress / DeepAgents on the same request, per variant (issue 18 item 13: a first
# sight of a thread may cost up to 2x, a reload and a warm call at most half).
GOALS = {"warm": 0.5, "next run": 0.5, "reload": 0.5, "cold": 2.0}
SIZES = (10_000, 100_000, 400_000)


@dataclass(frozen=True)
class Runs:
    below_warm: int
    below_fresh: int
    l1_first: int
    l1_repeat: int
    l2: int


FULL = Runs(below_warm=200, below_fresh=30, l1_first=8, l1_repeat=40, l2=12)
QUICK = Runs(below_warm=40, below_fresh=8, l1_first=3, l1_repeat=10, l2=4)


@dataclass
class Row:
    thread: str
    path: str
    timings: dict[str, Timing]
    actions: dict[str, str]

    @property
    def ratio_da(self) -> float:
        return self.timings["ctxpress"].p50_ms / self.timings["deepagents"].p50_ms


class CountingTokenCounter(TokenCounter):
    """A token counter that counts the whole-request counts made with it."""

    requests = 0

    def count_request(self, *args: Any, **kwargs: Any) -> int:
        self.requests += 1
        return super().count_request(*args, **kwargs)


class Bench:
    """The three middlewares over one thread, with scratch directories under `root`.

    Every ctxpress middleware it builds shares the bench's `counter`, as the middlewares of one
    agent would: a new middleware for a first L1 pass does not also pay for counting cold.
    """

    def __init__(self, thread: Thread, root: Path) -> None:
        self.counter = CountingTokenCounter()
        self.thread = thread
        self.root = root
        self.model = InstantChatModel()
        self.reloader = Reloader(thread.messages)
        self.next_run = NextRun(thread.messages)
        self.runtime: Runtime[Any] = Runtime()
        self._dirs = 0

    def scratch(self) -> Path:
        self._dirs += 1
        path = self.root / f"d{self._dirs}"
        path.mkdir(parents=True)
        return path

    # --- one call of each middleware on a message list -----------------------------------------

    def ours(
        self, threshold: int, workdir: LocalWorkdir, cache: CompactionCache
    ) -> Callable[[list[BaseMessage]], str]:
        middleware = make_ours(threshold, workdir, self.model, cache, self.counter)
        thread = self.thread

        def call(messages: list[BaseMessage]) -> str:
            request = model_request(self.model, messages, thread.system, thread.tools)
            response = middleware.wrap_model_call(request, canned_handler)
            return "summarised" if isinstance(response, ExtendedModelResponse) else "sent"

        return call

    def langchain(self, threshold: int) -> Callable[[list[BaseMessage]], str]:
        middleware = make_langchain(threshold, self.model)

        def call(messages: list[BaseMessage]) -> str:
            update = middleware.before_model({"messages": messages}, self.runtime)  # type: ignore[typeddict-item]
            return "summarised" if update else "below"

        return call

    def deepagents(self, threshold: int, root: Path) -> Callable[[list[BaseMessage]], str]:
        middleware = make_deepagents(threshold, self.model, root)
        thread = self.thread

        def call(messages: list[BaseMessage]) -> str:
            request = model_request(self.model, messages, thread.system, thread.tools)
            response = middleware.wrap_model_call(request, canned_handler)
            return "summarised" if isinstance(response, ExtendedModelResponse) else "below"

        return call


def _fresh(
    bench: Bench, call: Callable[[list[BaseMessage]], str], clear: bool
) -> Callable[[], Callable[[], object]]:
    def setup() -> Callable[[], object]:
        if clear:
            bench.counter.clear()
        messages = bench.reloader.load()
        return lambda: call(messages)

    return setup


def _next_run(bench: Bench, call: Callable[[list[BaseMessage]], str]) -> Callable[[], Callable[[], object]]:
    def setup() -> Callable[[], object]:
        serde, previous = bench.next_run.previous_run()
        call(previous)  # the previous run's last model call
        messages = bench.next_run.load(serde)
        return lambda: call(messages)

    return setup


def _same(bench: Bench, call: Callable[[list[BaseMessage]], str]) -> Callable[[], Callable[[], object]]:
    messages = bench.thread.messages
    return lambda: lambda: call(messages)


def _below_rows(
    bench: Bench, label: str, calls: dict[str, Callable[[list[BaseMessage]], str]], runs: Runs
) -> list[Row]:
    """Warm first, on a cache primed by these very objects (otherwise every lookup compares a
    string with an equal copy); then reload (new objects, warm cache); then the next run (the
    previous run's last call, then the next checkpoint read by the same `CheckpointSerializer`: only
    the second call is timed); then cold (cache cleared)."""
    actions = {name: "below" for name in calls}
    bench.counter.clear()
    warm = time_interleaved({n: _same(bench, c) for n, c in calls.items()}, runs.below_warm)
    reload = time_interleaved({n: _fresh(bench, c, clear=False) for n, c in calls.items()}, runs.below_fresh)
    next_run = time_interleaved({n: _next_run(bench, c) for n, c in calls.items()}, runs.below_fresh)
    cold = time_interleaved({n: _fresh(bench, c, clear=True) for n, c in calls.items()}, runs.below_fresh)
    bench.counter.clear()
    return [
        Row(label, "below, cold", cold, actions),
        Row(label, "below, reload", reload, actions),
        Row(label, "below, next run", next_run, actions),
        Row(label, "below, warm", warm, actions),
    ]


def _actions(
    calls: dict[str, Callable[[list[BaseMessage]], str]], messages: list[BaseMessage]
) -> dict[str, str]:
    return {name: call(list(messages)) for name, call in calls.items()}


def l1_tokens(thread: Thread, root: Path) -> int:
    """Estimated tokens of the thread's L1 view (default limits)."""
    view = compact_view(thread.messages, CompressionConfig(), LocalWorkdir(root), cache=CompactionCache())
    return count_request_tokens(view.messages, thread.system, thread.tools)


def measure_thread(thread: Thread, runs: Runs, root: Path) -> list[Row]:
    bench = Bench(thread, root)
    raw = thread.tokens
    below = raw * 2
    view = l1_tokens(thread, bench.scratch())
    l1_threshold = (raw + view) // 2
    l2_threshold = view // 2
    rows: list[Row] = []
    label = f"{thread.name} ({raw:,} tok, {len(thread.messages)} msgs)"

    # Below the threshold.
    workdir = LocalWorkdir(bench.scratch())
    ours = bench.ours(below, workdir, CompactionCache())
    lc = bench.langchain(below)
    da = bench.deepagents(below, bench.scratch())
    calls = {"ctxpress": ours, "langchain": lc, "deepagents": da}
    actions = {name: "below" for name in calls}
    rows.extend(_below_rows(bench, label, calls, runs))

    # L1 brings the request under the threshold.
    if view < raw * 0.98:
        lc = bench.langchain(l1_threshold)
        da = bench.deepagents(l1_threshold, bench.scratch())

        def first_l1(durable: bool) -> Callable[[], Callable[[], object]]:
            def setup() -> Callable[[], object]:
                workdir = LocalWorkdir(bench.scratch(), durable=durable)
                call = bench.ours(l1_threshold, workdir, CompactionCache())
                return lambda: call(thread.messages)

            return setup

        repeat_call = bench.ours(l1_threshold, LocalWorkdir(bench.scratch()), CompactionCache())
        peers = {"langchain": _same(bench, lc), "deepagents": _same(bench, da)}
        actions = {"ctxpress": "L1", **_actions({"langchain": lc, "deepagents": da}, thread.messages)}
        first = time_interleaved(
            {"ctxpress": first_l1(True), "no fsync": first_l1(False), **peers}, runs.l1_first
        )
        rows.append(Row(label, "L1, first pass", first, actions))
        no_fsync = {**first, "ctxpress": first["no fsync"]}
        rows.append(Row(label, "L1, first pass, workdir without fsync", no_fsync, actions))
        rows.append(
            Row(
                label,
                "L1, same history again",
                time_interleaved({"ctxpress": _same(bench, repeat_call), **peers}, runs.l1_repeat),
                actions,
            )
        )

    # L2: a summary is needed even after L1.
    l2_call = bench.ours(l2_threshold, LocalWorkdir(bench.scratch()), CompactionCache())
    lc = bench.langchain(l2_threshold)
    da = bench.deepagents(l2_threshold, bench.scratch())
    calls = {"ctxpress": l2_call, "langchain": lc, "deepagents": da}
    actions = {"ctxpress": "L1+L2", **_actions({"langchain": lc, "deepagents": da}, thread.messages)}
    rows.append(
        Row(
            label,
            "L2 (instant summary)",
            time_interleaved({n: _same(bench, c) for n, c in calls.items()}, runs.l2),
            actions,
        )
    )
    return rows


def measure_reference(runs: Runs, root: Path) -> tuple[Thread, list[Row], Timing]:
    thread = reference_thread()
    bench = Bench(thread, root)
    below = thread.tokens * 2
    calls = {
        "ctxpress": bench.ours(below, LocalWorkdir(bench.scratch()), CompactionCache()),
        "langchain": bench.langchain(below),
        "deepagents": bench.deepagents(below, bench.scratch()),
    }
    label = f"{thread.name} ({thread.tokens:,} tok, {len(thread.messages)} msgs)"
    rows = _below_rows(bench, label, calls, runs)
    approx = time_interleaved(
        {"approx": lambda: lambda: count_tokens_approximately(thread.messages)}, runs.below_warm
    )
    return thread, rows, approx["approx"]


def profile_below(thread: Thread, root: Path, calls: int = 300) -> str:
    bench = Bench(thread, root)
    call = bench.ours(thread.tokens * 2, LocalWorkdir(bench.scratch()), CompactionCache())
    call(thread.messages)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        call(thread.messages)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(12)
    return out.getvalue()


@dataclass(frozen=True)
class Diagnosis:
    """How often one ctxpress call counts the whole request, and what one count costs."""

    thread: str
    counts_below: int
    counts_l1: int
    count_warm: Timing  # the middleware's count (whole-message memo), same objects
    count_reload: Timing  # the same, on a reload of equal messages in new objects
    exact_reload: Timing  # the per-content count without the memo, on a reload
    release: Timing  # freeing one loaded copy of the thread (what adopting a reload frees)
    read_fields: Timing  # reading each reloaded message's counted fields, nothing else
    cold: Timing  # one count of new objects by a fresh counter, as installed (the C walk where built)
    cold_numpy: Timing  # the same without the C scan (numpy's batch scan where numpy is installed)
    cold_pure: Timing  # the same with neither (the pure-Python fallback)
    cold_no_scan: Timing  # the same with every text "estimated" by len(): the bookkeeping alone
    approx: Timing  # count_tokens_approximately on new objects (the peers' count)
    encode: Timing  # encoding every string content of the thread to UTF-8 (a scan's first step)
    load_langgraph: Timing  # reading the next run's checkpoint with LangGraph's serializer
    load_first: Timing  # the same with a new CheckpointSerializer (no message kept yet)
    load_next: Timing  # the same with the CheckpointSerializer that read and wrote the previous run's
    turn_messages: int  # messages the previous run made (decoded for the first time by the next)
    top_function: str  # largest self time in a profile of warm counts
    top_share: float


def diagnose(thread: Thread, root: Path, runs: Runs) -> Diagnosis:
    """Count the calls of `count_request_tokens` made by one below-threshold and one (repeated) L1
    call, and time a single whole-request count as the middleware makes it, warm and after a reload."""
    bench = Bench(thread, root)
    view = l1_tokens(thread, bench.scratch())
    below = bench.ours(thread.tokens * 2, LocalWorkdir(bench.scratch()), CompactionCache())
    l1 = bench.ours((thread.tokens + view) // 2, LocalWorkdir(bench.scratch()), CompactionCache())
    below(thread.messages)
    l1(thread.messages)
    counter = bench.counter
    counted = counter.requests
    below(thread.messages)
    counts_below, counted = counter.requests - counted, counter.requests
    l1(thread.messages)
    counts_l1 = counter.requests - counted

    def count(messages: list[BaseMessage], memo: bool = True) -> Callable[[], object]:
        return lambda: counter.count_request(messages, thread.system, thread.tools, immutable_messages=memo)

    def release() -> Callable[[], object]:
        loaded = [bench.reloader.load()]
        return loaded.clear

    warm = time_interleaved({"count": lambda: count(thread.messages)}, runs.below_warm)["count"]
    reloaded = time_interleaved(
        {
            "memo": lambda: count(bench.reloader.load()),
            "exact": lambda: count(bench.reloader.load(), memo=False),
            "release": release,
            "fields": lambda: partial(list, map(message_fields, bench.reloader.load())),
        },
        runs.below_fresh,
    )
    cold = time_interleaved(
        {
            "cold": lambda: _cold_count(bench, "installed"),
            "numpy": lambda: _cold_count(bench, "numpy"),
            "pure": lambda: _cold_count(bench, "pure"),
            "no scan": lambda: _cold_count(bench, "len"),
            "approx": lambda: partial(count_tokens_approximately, bench.reloader.load()),
            "encode": lambda: partial(_encode_contents, bench.reloader.load()),
        },
        runs.below_fresh,
    )
    next_run = bench.next_run
    loads = time_interleaved(
        {
            "langgraph": lambda: partial(JsonPlusSerializer().loads_typed, next_run.checkpoint),
            "first": lambda: partial(CheckpointSerializer().loads_typed, next_run.checkpoint),
            "next": lambda: partial(next_run.previous_run()[0].loads_typed, next_run.checkpoint),
        },
        runs.below_fresh,
    )
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(50):
        counter.count_request(thread.messages, thread.system, thread.tools, immutable_messages=True)
    profiler.disable()
    entries = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    total = sum(entry[2] for entry in entries.values())
    (_, _, top), top_entry = max(entries.items(), key=lambda item: item[1][2])
    return Diagnosis(
        thread.name,
        counts_below,
        counts_l1,
        warm,
        reloaded["memo"],
        reloaded["exact"],
        reloaded["release"],
        reloaded["fields"],
        cold["cold"],
        cold["numpy"],
        cold["pure"],
        cold["no scan"],
        cold["approx"],
        cold["encode"],
        loads["langgraph"],
        loads["first"],
        loads["next"],
        len(next_run.turn),
        top,
        top_entry[2] / total,
    )


def _cold_count(bench: Bench, scan: str) -> Callable[[], object]:
    return cold_count(bench.thread, bench.reloader.load(), scan)


def cold_count(thread: Thread, messages: list[BaseMessage], scan: str) -> Callable[[], object]:
    """One whole-request count of `messages` (new objects) by a fresh counter, with the scan `scan`
    (`scans.scan_paths`: "installed", "numpy", "pure"), or "len": the Python path with no scan at
    all, every text "estimated" by its length (its bookkeeping alone)."""
    counter = TokenCounter()
    if scan == "len":
        cache = counter._caches("default")[0]
        cache.count_text, cache.count_texts = len, map_len

    def run() -> None:
        with scan_paths("pure" if scan == "len" else scan):
            counter.count_request(messages, thread.system, thread.tools, immutable_messages=True)

    return run


def map_len(texts: Sequence[str]) -> list[int]:
    return list(map(len, texts))


def _encode_contents(messages: list[BaseMessage]) -> None:
    for message in messages:
        if isinstance(message.content, str):
            message.content.encode("utf-8", "surrogatepass")


def explain(diagnosis: Diagnosis, rows: list[Row]) -> list[str]:
    """Where the below-threshold time goes, from the measurements."""
    mine = {row.path: row for row in rows if row.thread.startswith(diagnosis.thread + " ")}
    da_warm = mine["below, warm"].timings["deepagents"].p50_ms
    da_reload = mine["below, reload"].timings["deepagents"].p50_ms
    next_run = mine["below, next run"]
    warm, reload = diagnosis.count_warm.p50_ms, diagnosis.count_reload.p50_ms
    lines = [
        f"Where the time goes ({diagnosis.thread}): a below-threshold call counts the whole request "
        f"{diagnosis.counts_below}×, an L1 call {diagnosis.counts_l1}×. The middleware counts with the "
        "whole-message memo (`ctxpress.tokens.message_memo`: a LangGraph state's messages are replaced, never "
        "edited in place, so a message's count is remembered by its id and found again by comparing its "
        "fields; and the list a thread last counted is kept whole with its total, so a list that starts "
        f"with it is found by one comparison of the two field lists). One count takes {warm:.3f} ms warm ({warm / da_warm:.2f}× DeepAgents' whole warm call) "
        f"and {reload:.3f} ms after a reload ({reload / da_reload:.2f}× DeepAgents' whole call on reloaded "
        "messages).",
        f"- warm: the same objects again, as on every model call after the first of a run: per message "
        f"one tuple of its fields, then one comparison of the field lists (identity checks in C); the "
        f"largest self time in a "
        f"profile is `{diagnosis.top_function}` ({diagnosis.top_share:.0%}).",
        f"- next run (the first call of a run, its checkpoint read by the `CheckpointSerializer` that "
        f"read and wrote the previous run's, `ctxpress.checkpoint_serde`): every message stored in the "
        f"same bytes comes back as the object the previous run's calls counted -- those it read and the "
        f"{diagnosis.turn_messages} it made and wrote -- so the count is the warm path plus the new "
        f"question; the whole call is "
        f"{next_run.ratio_da:.2f}× DeepAgents'. Reading that checkpoint takes "
        f"{diagnosis.load_next.p50_ms:.2f} ms, against {diagnosis.load_first.p50_ms:.2f} ms for a "
        f"serializer that kept nothing yet (messages rebuilt without validation) and "
        f"{diagnosis.load_langgraph.p50_ms:.2f} ms for LangGraph's own.",
        f"- reload (the first call of a run whose checkpoint another serializer read, LangGraph's own "
        f"for one: equal messages in new objects): the new field list is compared "
        f"with the remembered one in C, strings byte by byte (chars/4 reads only their lengths: no key "
        f"cheaper than the content stays right when a message is replaced under its id by text of the "
        f"same length), and kept so the run's later calls are identity checks again; that releases the "
        f"previous copy, and freeing one loaded copy of this thread alone takes "
        f"{diagnosis.release.p50_ms:.3f} ms. Reading the counted fields of the reloaded messages alone "
        f"(one attribute tuple per message, in new objects whose memory is not yet in the CPU's caches; "
        f"no comparison) takes {diagnosis.read_fields.p50_ms:.3f} ms, "
        f"{diagnosis.read_fields.p50_ms / da_reload:.2f}× DeepAgents' whole call. The count without the memo (hashing every new string) takes "
        f"{diagnosis.exact_reload.p50_ms:.3f} ms on the same reload.",
        f"- cold (a first sight of the thread): the memo's misses are counted after its loop in one "
        f"call (`messages.count_new_messages`): where the C extension was built, one C walk reads "
        f"and estimates the messages' texts and tool calls (`_scan.first_sight`); one count takes "
        f"{diagnosis.cold.p50_ms:.3f} ms ({diagnosis.cold.p50_ms / diagnosis.approx.p50_ms:.1f}× "
        f"`count_tokens_approximately` on the same objects, {diagnosis.approx.p50_ms:.3f} ms). "
        f"Without the C scan, every new text and tool call is estimated in one batch first "
        f"(`messages.prefetch_texts`, one numpy scan of all their bytes): "
        f"{diagnosis.cold_numpy.p50_ms:.3f} ms; without numpy too (the pure-Python fallback, a scan "
        f"per text) {diagnosis.cold_pure.p50_ms:.3f} ms, and {diagnosis.cold_no_scan.p50_ms:.3f} ms "
        f"with `len()` in place of the scan -- "
        f"the per-message and per-text bookkeeping (fields, cache keys, JSON of tool arguments, "
        f"stores) alone. Encoding the string contents to UTF-8, the scan's first step, takes "
        f"{diagnosis.encode.p50_ms:.3f} ms. The token counter pays this once per text, so in a "
        "running agent it is paid for the new messages of each call, not the whole thread.",
    ]
    return lines


def fsync_lines(rows: list[Row]) -> list[str]:
    """What fsync costs in L1's first pass, per thread (from the with / without rows)."""
    first = {row.thread: row for row in rows if row.path == "L1, first pass"}
    bare = {row.thread: row for row in rows if row.path == "L1, first pass, workdir without fsync"}
    parts = []
    for thread, row in first.items():
        with_fsync = row.timings["ctxpress"].p50_ms
        without = bare[thread].timings["ctxpress"].p50_ms
        parts.append(
            f"{thread.split(' ')[0]} {with_fsync:.1f} ms vs {without:.1f} ms ({1 - without / with_fsync:.0%} fsync)"
        )
    if not parts:
        return []
    return [
        "L1's first pass writes every offloaded result with `LocalWorkdir`'s default fsync: "
        + "; ".join(parts)
        + ". The state keeps every full result (S1, S2), so an offloaded file lost in a crash can be "
        "written again; it needs durability only once a history file names it (L2), so fsyncing "
        "offloaded files at the L2 history write instead of at every offload would take most of that "
        "off the L1 path. The peers have no L1: on the same request they either pass it on (below) or "
        "summarise."
    ]


def _cell(timing: Timing) -> str:
    return f"{timing.p50_ms:.3f} / {timing.p95_ms:.3f}"


def render(rows: list[Row]) -> list[str]:
    return table(
        [
            "thread",
            "path",
            "ctxpress p50 / p95 ms",
            "LangChain p50 / p95 ms",
            "DeepAgents p50 / p95 ms",
            "ctxpress ÷ LangChain",
            "ctxpress ÷ DeepAgents",
            "what the peers did (LC / DA)",
        ],
        (
            [
                row.thread,
                row.path,
                _cell(row.timings["ctxpress"]),
                _cell(row.timings["langchain"]),
                _cell(row.timings["deepagents"]),
                ratio(row.timings["ctxpress"].p50_ms, row.timings["langchain"].p50_ms),
                ratio(row.timings["ctxpress"].p50_ms, row.timings["deepagents"].p50_ms),
                f"{row.actions['langchain']} / {row.actions['deepagents']}",
            ]
            for row in rows
        ),
    )


def verdict(rows: list[Row]) -> list[str]:
    """The goal, judged per variant of the below-threshold path (warm, next run, reload, cold)."""
    lines = []
    for variant in ("warm", "next run", "reload", "cold"):
        below = [row for row in rows if row.path == f"below, {variant}"]
        goal = GOALS[variant]
        missed = [row for row in below if row.ratio_da > goal]
        worst = max(below, key=lambda row: row.ratio_da)
        if not missed:
            lines.append(
                f"- **{variant}: goal met** on all {len(below)} threads (≤ {goal}× DeepAgents; "
                f"worst {worst.ratio_da:.2f}×, {worst.thread})."
            )
        else:
            lines.append(
                f"- **{variant}: goal missed** on {len(missed)} of {len(below)} threads (≤ {goal}× "
                "DeepAgents): "
                + ", ".join(f"{row.thread.split(' ')[0]} {row.ratio_da:.2f}×" for row in missed)
                + "."
            )
    return [
        "Goal: below the threshold, ctxpress takes at most 0.5× DeepAgents' time on the same request warm "
        "and after a reload (next run and reload), and at most 2× on a first sight of the thread (cold).",
        "",
        *lines,
    ]


def main(argv: list[str] | None = None) -> None:
    parser = bench_parser(__doc__, "fewer runs; docs/benchmarks.md is not updated")
    parser.add_argument(
        "--profile", action="store_true", help="cProfile ctxpress' below-threshold call (100K thread)"
    )
    args = parser.parse_args(argv)
    runs = QUICK if args.quick else FULL

    root = Path(tempfile.mkdtemp(prefix="ctxpress-overhead-"))
    try:
        rows: list[Row] = []
        threads = []
        for size in SIZES:
            thread = build_thread(size)
            threads.append(thread)
            settle()
            started = time.perf_counter()
            rows.extend(measure_thread(thread, runs, root / thread.name))
            print(
                f"{thread.name}: {thread.tokens:,} estimated tokens, {len(thread.messages)} messages, "
                f"measured in {time.perf_counter() - started:.0f} s",
                flush=True,
            )
        reference, reference_rows, approx = measure_reference(runs, root / "reference")
        diagnosis = diagnose(threads[1], root / "diagnosis", runs)
        profile = profile_below(threads[1], root / "profile") if args.profile else ""
    finally:
        shutil.rmtree(root, ignore_errors=True)

    goal = verdict(rows + reference_rows)
    lines = [
        "## Middleware overhead per model call (model excluded)",
        "",
        f"Reproduce: `{COMMAND}` (`--quick` for a short run; Python {platform.python_version()}, "
        f"{platform.machine()}, 2 cores; all three middlewares timed round-robin in one run, so read the "
        "ratios rather than the milliseconds). Requests: threads concatenated from the real traces "
        "(`bench/common.py: build_thread`, provider-valid; tokens are ctxpress' estimate of the whole "
        "request). The main model is a canned `ModelResponse`; summaries come from an instant fake "
        "model. ctxpress and DeepAgents are called through `wrap_model_call`, LangChain through "
        "`before_model` (where it acts). Peers: trigger at the same token count, keep 10 messages, their "
        "default chars/4 counter; DeepAgents with a `FilesystemBackend` and its `write_file`/`edit_file` "
        "argument truncation from the same trigger. cold = new message objects and an empty token cache; "
        "reload = new message objects, warm cache (a checkpoint read by another serializer, LangGraph's "
        "own for one); next run = the next run's first call, its checkpoint read through the "
        "`ctxpress.checkpoint_serde.CheckpointSerializer` that read and wrote the previous run's "
        "(`bench/common.py: NextRun`); warm = the same objects again. "
        "L1 threshold: midway between the thread and its L1 view; L2 threshold: half the L1 view.",
        "",
        *render(rows),
        "",
        f"Reference point: the real {len(reference.messages)}-message thread of `token_samples.real_thread` "
        f"({reference.chars / 1e6:.2f} M characters, {reference.utf8_bytes / 1e6:.2f} MB of text and "
        f"tool arguments, {reference.tokens:,} estimated tokens; it stops at 401 messages long before "
        "1.4 MB). `count_tokens_approximately` (the peers' chars/4) alone takes "
        f"{approx.p50_ms:.3f} ms (p50) per call there.",
        "",
        *render(reference_rows),
        "",
        *goal,
        "",
        *explain(diagnosis, rows),
        "",
        *fsync_lines(rows),
    ]
    print("\n".join(lines))
    if profile:
        print("\ncProfile of ctxpress below the threshold, warm (100K thread):\n" + profile)
    if not (args.quick or args.no_docs):
        update_docs(MARKER, lines)


if __name__ == "__main__":
    main()
