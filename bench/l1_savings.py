"""How many over-threshold requests L1 alone serves, what reaches the model, and how many summary
calls are made: ctxpress vs. its peers over every real conversation (issue "Benchmarks side by
side with the peers, on real conversations", goal 2).

    .venv/bin/python bench/l1_savings.py           # full run, updates docs/benchmarks.md
    .venv/bin/python bench/l1_savings.py --quick   # first long session per source only, no docs

Every conversation of the shared traces is replayed request by request (`common.replay_all`)
through ctxpress, LangChain v1's and DeepAgents' summarization middleware, at thresholds of 8K,
32K and 100K (x 1024 tokens), with an instant fake summary model. A conversation that none of the
three sees reach the threshold (each by its own counter, on its largest request) passes unchanged
through all three and is not replayed. No recorded conversation reaches 32K, so the same replays
are also run on long sessions: each data set's conversations concatenated into threads of about
150K estimated tokens (the first three of each data set), as when a user keeps working in one
thread.

Measures:
- over-threshold requests: calls whose request (after the current summary, if any) ctxpress
  estimates at or above the threshold; "served by L1" = brought under it without a summary call;
- summary calls: calls of each middleware's summary model;
- tokens sent: the requests the main model received (system prompt, messages, tool schemas),
  summed, in ctxpress' estimate (default profile) and in real cl100k tokens (tiktoken, with 4
  tokens of framing per message and tool call, as the estimator counts them).

Goal: on tool-heavy traces (swe-agent, openhands, tau-bench, toolbench), at least 50% of the
over-threshold requests served without a summary call.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage, SystemMessage

from common import (
    PEERS,
    THRESHOLDS_K,
    TOOL_HEAVY_SOURCES,
    Replay,
    Thread,
    bench_parser,
    ratio,
    reaches_threshold,
    replay_all,
    replay_sets,
    share,
    table,
    update_docs,
)
from ctxpress.app.testing.real_tokenizers import load_real_tokenizer
from ctxpress.compaction.content import content_text
from ctxpress.config import TOKENS_PER_K
from ctxpress.tokens import TokenCounter

MARKER = "l1_savings"
COMMAND = ".venv/bin/python bench/l1_savings.py"
GOAL_SHARE = 0.5
TOOL_HEAVY = "tool-heavy (4 sets)"
ALL = "all"


class RealMeter:
    """Real tokens of a request for one tokenizer: per message 4 + content, per tool call 4 + name +
    JSON arguments; the system message likewise; the tool schemas as JSON; 3 for the reply primer.
    Texts are counted once and remembered."""

    def __init__(self, count: Callable[[str], int]) -> None:
        self._count = count
        self._texts: dict[str, int] = {}

    def text(self, text: str) -> int:
        tokens = self._texts.get(text)
        if tokens is None:
            tokens = self._texts[text] = self._count(text)
        return tokens

    def message(self, message: BaseMessage) -> int:
        tokens = 4 + self.text(content_text(message.content))
        for call in getattr(message, "tool_calls", None) or ():
            tokens += 4 + self.text(call["name"]) + self.text(json.dumps(call["args"], ensure_ascii=False))
        return tokens

    def fixed(self, system: SystemMessage | None, tools: list[Any]) -> int:
        """What every request of a thread carries besides its messages."""
        return (
            3
            + (self.message(system) if system is not None else 0)
            + (self.text(json.dumps(tools, ensure_ascii=False)) if tools else 0)
        )


class Costs:
    """(estimated, cl100k) tokens of messages, remembered per message object: a replay sends the
    same objects again and again, so each request is summed from memos."""

    def __init__(self, meter: RealMeter) -> None:
        self.meter = meter
        self.counter = TokenCounter()
        self._memo: dict[int, tuple[BaseMessage, int, int]] = {}

    def message(self, message: BaseMessage) -> tuple[int, int]:
        entry = self._memo.get(id(message))
        if entry is None or entry[0] is not message:
            entry = (message, self.counter.count_message(message), self.meter.message(message))
            self._memo[id(message)] = entry
        return entry[1], entry[2]

    def request(self, messages: Sequence[BaseMessage], thread: Thread) -> tuple[int, int]:
        est = self.counter.count_request([], thread.system, thread.tools)
        real = self.meter.fixed(thread.system, thread.tools)
        for message in messages:
            one_est, one_real = self.message(message)
            est += one_est
            real += one_real
        return est, real


@dataclass
class Tally:
    threads: int = 0
    reaching: int = 0
    calls: int = 0
    over: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    served_by_l1: int = 0
    summary_calls: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    summaries: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    sent_est: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    sent_real: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, other: Tally) -> None:
        self.threads += other.threads
        self.reaching += other.reaching
        self.calls += other.calls
        self.served_by_l1 += other.served_by_l1
        for mine, theirs in (
            (self.over, other.over),
            (self.summary_calls, other.summary_calls),
            (self.summaries, other.summaries),
            (self.sent_est, other.sent_est),
            (self.sent_real, other.sent_real),
        ):
            for key, value in theirs.items():
                mine[key] += value


def tally_thread(thread: Thread, threshold: int, meter: RealMeter, scratch: Path) -> Tally:
    """Replay one thread through the three middlewares (unless none of them would act on it)."""
    tally = Tally(threads=1)
    if not reaches_threshold(thread, threshold):
        return tally
    tally.reaching = 1
    replays: dict[str, Replay] = replay_all(thread, threshold, scratch)
    ours = replays["ctxpress"]
    tally.calls = len(ours.calls)
    tally.served_by_l1 = sum(1 for call in ours.calls if call.over_threshold and call.level == "l1")
    costs = Costs(meter)
    for name, replay in replays.items():
        tally.over[name] = sum(1 for call in replay.calls if call.over_threshold)
        tally.summary_calls[name] = replay.model.calls
        tally.summaries[name] = len(replay.summaries)
        for call in replay.calls:
            est, real = costs.request(call.sent, thread)
            tally.sent_est[name] += est
            tally.sent_real[name] += real
    # The same requests with no middleware at all: prefixes of the thread, summed incrementally.
    est, real = costs.request([], thread)
    done = 0
    for call in ours.calls:
        for message in thread.messages[done : call.position]:
            one_est, one_real = costs.message(message)
            est += one_est
            real += one_real
        done = call.position
        tally.sent_est["none"] += est
        tally.sent_real["none"] += real
    return tally


def run(quick: bool) -> dict[tuple[str, int, str], Tally]:
    """Tallies keyed by (set, threshold in K, source or group)."""
    meter = RealMeter(load_real_tokenizer("cl100k").count)
    results: dict[tuple[str, int, str], Tally] = defaultdict(Tally)
    for set_name, threads in replay_sets(quick).items():
        for k in THRESHOLDS_K:
            started = time.perf_counter()
            for thread in threads:
                with tempfile.TemporaryDirectory(prefix="ctxpress-l1-") as scratch:
                    tally = tally_thread(thread, k * TOKENS_PER_K, meter, Path(scratch))
                results[(set_name, k, thread.source)].add(tally)
                if thread.source in TOOL_HEAVY_SOURCES:
                    results[(set_name, k, TOOL_HEAVY)].add(tally)
                results[(set_name, k, ALL)].add(tally)
            print(
                f"{set_name} at {k}K: {len(threads)} threads in {time.perf_counter() - started:.0f} s",
                flush=True,
            )
    return results


def _groups(results: dict[tuple[str, int, str], Tally], set_name: str) -> list[tuple[int, str, Tally]]:
    sources = sorted({key[2] for key in results if key[0] == set_name} - {TOOL_HEAVY, ALL})
    return [
        (k, group, results[(set_name, k, group)])
        for k in THRESHOLDS_K
        for group in [*sources, TOOL_HEAVY, ALL]
        if (set_name, k, group) in results
    ]


def _summaries(t: Tally, name: str) -> str:
    """Summary-model calls, plus summaries made without one (LangChain's trimming can leave
    nothing to summarise: the summary then reads "Previous conversation was too long to summarize.")."""
    placeholders = t.summaries[name] - t.summary_calls[name]
    return f"{t.summary_calls[name]}" + (f" (+{placeholders})" if placeholders > 0 else "")


def l1_table(results: dict[tuple[str, int, str], Tally], set_name: str) -> list[str]:
    rows = []
    for k, group, t in _groups(results, set_name):
        if not t.reaching:
            continue
        rows.append(
            [
                f"{k}K",
                group,
                f"{t.reaching} / {t.threads}",
                t.over["ctxpress"],
                t.served_by_l1,
                share(t.served_by_l1, t.over["ctxpress"]),
                f"{t.over['langchain']} / {t.over['deepagents']}",
                " / ".join(_summaries(t, name) for name in PEERS),
            ]
        )
    return table(
        [
            "threshold",
            "traces",
            "threads reaching it / all",
            "over-threshold requests (ctxpress)",
            "served by L1 alone",
            "share",
            "over-threshold by their count (LC / DA)",
            "summary calls ctxpress / LC / DA (+ placeholder summaries)",
        ],
        rows,
    )


def tokens_table(results: dict[tuple[str, int, str], Tally], set_name: str) -> list[str]:
    rows = []
    for k, group, t in _groups(results, set_name):
        if not t.reaching:
            continue
        rows.append(
            [
                f"{k}K",
                group,
                t.calls,
                *(f"{t.sent_est[name]:,}" for name in ("none", *PEERS)),
                ratio(t.sent_est["ctxpress"], t.sent_est["langchain"]),
                ratio(t.sent_est["ctxpress"], t.sent_est["deepagents"]),
                *(f"{t.sent_real[name]:,}" for name in ("none", *PEERS)),
                ratio(t.sent_real["ctxpress"], t.sent_real["langchain"]),
                ratio(t.sent_real["ctxpress"], t.sent_real["deepagents"]),
            ]
        )
    return table(
        [
            "threshold",
            "traces",
            "requests",
            "est.: no middleware",
            "est.: ctxpress",
            "est.: LangChain",
            "est.: DeepAgents",
            "est. ctxpress ÷ LC",
            "est. ctxpress ÷ DA",
            "cl100k: no middleware",
            "cl100k: ctxpress",
            "cl100k: LangChain",
            "cl100k: DeepAgents",
            "cl100k ctxpress ÷ LC",
            "cl100k ctxpress ÷ DA",
        ],
        rows,
    )


def unreached(results: dict[tuple[str, int, str], Tally], set_name: str, threads: list[Thread]) -> list[str]:
    """A sentence for the thresholds no thread of the set reaches (their rows are left out)."""
    missing = [f"{k}K" for k in THRESHOLDS_K if not results[(set_name, k, ALL)].reaching]
    if not missing:
        return []
    largest = max(threads, key=lambda thread: thread.tokens)
    return [
        "",
        f"No thread reaches {' or '.join(missing)} (the largest, {largest.name}, is {largest.tokens:,} "
        "estimated tokens), so those thresholds have no rows here.",
    ]


def goal_lines(results: dict[tuple[str, int, str], Tally]) -> list[str]:
    lines = []
    for set_name in ("conversations", "sessions"):
        for k in THRESHOLDS_K:
            t = results.get((set_name, k, TOOL_HEAVY))
            if t is None:
                continue
            over = t.over["ctxpress"]
            if not over:
                lines.append(
                    f"- {set_name}, {k}K: no tool-heavy request reaches the threshold (nothing to judge)."
                )
                continue
            got = t.served_by_l1 / over
            verdict = "met" if got >= GOAL_SHARE else "**missed**"
            lines.append(
                f"- {set_name}, {k}K: {t.served_by_l1} of {over} over-threshold tool-heavy requests "
                f"({got:.0%}) served by L1 alone: goal (≥ {GOAL_SHARE:.0%}) {verdict}."
            )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = bench_parser(__doc__, "first long session per source only; no docs update")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    results = run(args.quick)
    sets = replay_sets(args.quick)
    lines = [
        "## L1 savings, tokens sent and summary calls on real conversations",
        "",
        f"Reproduce: `{COMMAND}` ({time.perf_counter() - started:.0f} s here; `--quick` replays only the first long "
        "session of each data set). Every recorded conversation of the shared traces replayed request "
        "by request through ctxpress (default limits, keep 10), LangChain v1's `SummarizationMiddleware` "
        "and DeepAgents' `SummarizationMiddleware` (same trigger in tokens, keep 10 messages, their "
        "default chars/4 counter; DeepAgents' `write_file`/`edit_file` argument truncation on from the "
        "same trigger), with an instant fake summary model giving every middleware the same summary text. "
        "Threads that no middleware sees reach the threshold are not replayed (all three pass them "
        "through unchanged). Over-threshold = ctxpress' estimate of the effective request (summary + "
        "kept messages after a summary) at or above the threshold; the peers' own count is shown beside "
        "it: chars/4 undercounts Chinese, so at the same number they often do not trigger at all. "
        "Summary calls are calls of the summary model; (+n) are the peers' summaries made without one: "
        "both trim the summary input to the last 4,000 tokens starting on a human message "
        "(`trim_tokens_to_summarize`, their default), and when the last human message is further back "
        "than that -- one request followed by many tool calls -- nothing is left and the summary reads "
        '"Previous conversation was too long to summarize."',
        "",
        "### Recorded conversations",
        "",
        *l1_table(results, "conversations"),
        *unreached(results, "conversations", sets["conversations"]),
        "",
        "Tokens sent to the main model, summed over every request of the threads that reached the "
        "threshold (`est.` = ctxpress' estimator, default profile; `cl100k` = tiktoken, real tokens):",
        "",
        *tokens_table(results, "conversations"),
        "",
        "### Long sessions (each data set's conversations concatenated into ~150K-token threads; first three per set)",
        "",
        *l1_table(results, "sessions"),
        *unreached(results, "sessions", sets["sessions"]),
        "",
        *tokens_table(results, "sessions"),
        "",
        "Goal (tool-heavy traces: ≥ 50% of over-threshold requests served without a summary call):",
        "",
        *goal_lines(results),
    ]
    print("\n".join(lines))
    if not (args.quick or args.no_docs):
        update_docs(MARKER, lines)


if __name__ == "__main__":
    main()
