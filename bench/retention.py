"""What the model still sees after compression: facts kept in view, facts one file read away, and
what they cost -- ctxpress vs. its peers over every real conversation (issue 21).

    .venv/bin/python bench/retention.py             # full run, updates docs/benchmarks.md
    .venv/bin/python bench/retention.py --quick     # first long session per data set only, no docs
    .venv/bin/python bench/retention.py --summary-model-url http://127.0.0.1:8080/v1 --quick

Every conversation of the shared traces (all six data sets) and the long sessions made from them
(`common.replay_sets`) is replayed request by request (`common.replay_all`) through ctxpress,
LangChain v1's `SummarizationMiddleware` and DeepAgents' summarization at 8K and 32K, with the
same summary model for all three: the instant model of the other peer benchmarks (the same
canned summary text for everyone), or with `--summary-model-url` any OpenAI-compatible server.

Facts are taken with `ctxpress.tools.facts` (its docstring has the rules) from the recorded
messages. At every request where at least one of the three sends something other than the raw
history ("after a compression"), for each middleware:

- compressed messages: recorded messages before the request that its request does not carry
  intact (summarised away, offloaded, arguments cut);
- verbatim: facts of those messages whose text occurs in the request (system prompt, messages,
  tool-call arguments);
- reachable, one read: verbatim, or in a file whose path the request names (ctxpress: offloaded
  results and history files; DeepAgents: its history file as it was at that request), read as
  the model would read it (JSON strings decoded, XML entities unescaped); LangChain keeps no file;
- reachable, following references: also in the files those files name, and so on (a ctxpress
  history file keeps an offloaded result as its file reference and names the history file before
  it: more than one read);
- facts in view: every fact of the recorded history before the request that occurs in it,
  per 1,000 request tokens (cl100k, tiktoken; the same requests and the same facts for all three);
- the current question (the last user message) and the last tool result: carried intact
  (verbatim somewhere in the request) or not; and the last tool result intact or whole in a file
  the request names (S8 previews every result over the limit, the newest one included: its full
  text is then one read away, which is reported beside "intact", not counted as intact).

Goal (tool-heavy traces): ctxpress ≥ 1.5× the best peer's facts in view per 1,000 tokens, 100%
reachable, the current question never lost.
"""

from __future__ import annotations

import html
import json
import re
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import LLMResult

from common import (
    PEERS,
    TOOL_HEAVY_SOURCES,
    InstantChatModel,
    Replay,
    Thread,
    bench_parser,
    reaches_threshold,
    replay_all,
    replay_sets,
    share,
    table,
    update_docs,
)
from ctxpress.app.testing.real_tokenizers import load_real_tokenizer
from ctxpress.config import TOKENS_PER_K
from ctxpress.summary.event import is_summary_message
from ctxpress.summary.history import is_conversation_file
from ctxpress.tools.facts import message_facts, message_text
from l1_savings import Costs, RealMeter

MARKER = "retention"
COMMAND = ".venv/bin/python bench/retention.py"
THRESHOLDS_K: tuple[int, ...] = (8, 32)
GOAL_DENSITY_RATIO = 1.5
TOOL_HEAVY = "tool-heavy (4 sets)"
ALL = "all"
NAMES = {"ctxpress": "ctxpress", "langchain": "LangChain", "deepagents": "DeepAgents"}
#: Files a request can name: ctxpress' offloads and history files, DeepAgents' history file.
NAMED_FILE = re.compile(
    r"(?:outputs/(?:large_tool_results|conversation_history)|/conversation_history)/[A-Za-z0-9_.-]+"
)
DEEPAGENTS_SECTION = "## Summarized at "


# --------------------------------------------------------------------------------------------------
# Facts of texts, remembered
# --------------------------------------------------------------------------------------------------


class FactIndex:
    """The facts of one thread's recorded messages, and which of them occur in a given text.

    Each distinct text is searched once (the views of several middlewares and requests repeat the
    same texts in new message objects)."""

    def __init__(self, thread: Thread) -> None:
        self.thread = thread
        self.per_message = [frozenset(f.text for f in message_facts(m)) for m in thread.messages]
        self.universe = sorted(set().union(*self.per_message))
        self.texts = [message_text(m) for m in thread.messages]
        self._in_text: dict[str, frozenset[str]] = {}
        self._in_file: dict[str, frozenset[str]] = {}
        self.system = self.found(message_text(thread.system)) if thread.system else frozenset()

    def found(self, text: str) -> frozenset[str]:
        """The thread's facts that occur in `text`."""
        known = self._in_text.get(text)
        if known is None:
            known = self._in_text[text] = frozenset(fact for fact in self.universe if fact in text)
        return known

    def message(self, message: BaseMessage) -> tuple[str, frozenset[str]]:
        """The message's text and the thread's facts in it."""
        text = message_text(message)
        return text, self.found(text)

    def file(self, path: Path, text: str) -> frozenset[str]:
        """The thread's facts in a file's text, raw or as a model reads it (`readable`)."""
        known = self._in_file.get(text)
        if known is None:
            known = self._in_file[text] = self.found(text) | self.found(readable(path, text))
        return known


def readable(path: Path, text: str) -> str:
    """A file's text as a model reading it understands it: JSON Lines with their strings decoded,
    markdown/XML with entities unescaped."""
    if path.suffix == ".jsonl":
        strings: list[str] = []
        for line in text.splitlines():
            try:
                strings.extend(json_strings(json.loads(line)))
            except ValueError:
                strings.append(line)
        return "\n".join(strings)
    return html.unescape(text)


def json_strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from json_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from json_strings(item)


# --------------------------------------------------------------------------------------------------
# One request of one middleware
# --------------------------------------------------------------------------------------------------


@dataclass
class Tally:
    """Sums over the measured requests of one middleware."""

    requests: int = 0
    compressed_facts: int = 0
    verbatim: int = 0
    reachable: int = 0
    reachable_chained: int = 0
    facts_in_view: int = 0
    history_facts: int = 0
    tokens_real: int = 0
    tokens_est: int = 0
    question_intact: int = 0
    tool_result_intact: int = 0
    tool_result_recoverable: int = 0
    with_tool_result: int = 0

    def add(self, other: Tally) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @property
    def density(self) -> float:
        return 1000 * self.facts_in_view / self.tokens_real if self.tokens_real else 0.0


@dataclass
class ThreadResult:
    threads: int = 1
    reaching: int = 0
    tallies: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))
    summaries: dict[str, int] = field(default_factory=lambda: defaultdict(int))


class FileView:
    """The files of one middleware's replay, as they were at a given request."""

    def __init__(self, name: str, root: Path, replay: Replay) -> None:
        self.name = name
        self.root = root
        self._summaries_so_far: list[int] = []
        #: ctxpress: how many messages its conversation file held at each call (each summary
        #: rewrites it with every message before its cutoff, where the request's kept part begins).
        self._conversation_sizes: list[int] = []
        self._texts: dict[Path, str | None] = {}
        count = 0
        positions = {message.id: j for j, message in enumerate(replay.state_messages)}
        for call in replay.calls:
            count += call.level == "summary"
            self._summaries_so_far.append(count)
            summarised = len(call.sent) > 1 and is_summary_message(call.sent[0])
            self._conversation_sizes.append(positions.get(call.sent[1].id, 0) if summarised else 0)

    def text(self, path: str, call_index: int) -> tuple[Path, str] | None:
        if self.name == "langchain":
            return None
        file = self.root / path.strip("/").rstrip(".")
        # Read after the replay: ctxpress' files never change, but for its conversation file,
        # which only grows (cut back to its size at the call below).
        if file not in self._texts:
            # As stored: `read_text` would turn "\r\n" into "\n", and a stored result would no
            # longer hold its own text.
            self._texts[file] = (
                file.read_bytes().decode("utf-8", errors="replace") if file.is_file() else None
            )
        text = self._texts[file]
        if text is None:
            return None
        if self.name == "deepagents":  # one file per session, a section appended per summary
            sections = text.split(DEEPAGENTS_SECTION)
            text = DEEPAGENTS_SECTION.join(sections[: 1 + self._summaries_so_far[call_index]])
        elif is_conversation_file(path.strip("/")):  # its header, then one line per message
            lines = text.split("\n")
            text = "\n".join(lines[: 1 + self._conversation_sizes[call_index]])
        return file, text


def named_files(texts: Iterable[str]) -> set[str]:
    return {match.group(0).rstrip(".") for text in texts for match in NAMED_FILE.finditer(text)}


def measure_request(
    index: FactIndex,
    files: FileView,
    call_index: int,
    position: int,
    sent: Sequence[BaseMessage],
    history_facts: set[str],
    costs: Costs,
) -> Tally:
    """One middleware's request at `position` (the recorded messages before it are the history)."""
    tally = Tally(requests=1)
    sent_by_id: dict[str | None, str] = {}
    in_request: set[str] = set(index.system)
    for message in sent:
        text, found = index.message(message)
        in_request |= found
        sent_by_id[message.id] = text
    history = index.thread.messages[:position]
    compressed = [j for j, raw in enumerate(history) if sent_by_id.get(raw.id) != index.texts[j]]
    compressed_facts: set[str] = set().union(*(index.per_message[j] for j in compressed))
    one_read: set[str] = set()
    chained: set[str] = set()
    read_once: list[tuple[Path, str]] = []
    named = named_files(sent_by_id.values())
    seen = set(named)
    queue = [(path, True) for path in named]
    while queue:  # files named in the request (one read), then the files they name, and so on
        path, direct = queue.pop()
        opened = files.text(path, call_index)
        if opened is None:
            continue
        found = index.file(*opened)
        chained |= found
        if direct:
            one_read |= found
            read_once.append(opened)
        for inner in named_files([opened[1]]) - seen:
            seen.add(inner)
            queue.append((inner, False))
    tally.compressed_facts = len(compressed_facts)
    tally.verbatim = len(compressed_facts & in_request)
    tally.reachable = len(compressed_facts & (in_request | one_read))
    tally.reachable_chained = len(compressed_facts & (in_request | one_read | chained))
    tally.history_facts = len(history_facts)
    tally.facts_in_view = len(history_facts & in_request)
    tally.tokens_est, tally.tokens_real = costs.request(sent, index.thread)
    tally.question_intact = int(carried(history, HumanMessage, index, sent_by_id))
    if any(isinstance(m, ToolMessage) for m in history):
        tally.with_tool_result = 1
        tally.tool_result_intact = int(carried(history, ToolMessage, index, sent_by_id))
        tally.tool_result_recoverable = int(
            tally.tool_result_intact or in_a_file(last_text(history, ToolMessage, index), read_once)
        )
    return tally


def last_text(history: Sequence[BaseMessage], kind: type[BaseMessage], index: FactIndex) -> str:
    """The text of the last message of `kind` in the history (there is one)."""
    return next(index.texts[j] for j in range(len(history) - 1, -1, -1) if isinstance(history[j], kind))


def in_a_file(text: str, files: Iterable[tuple[Path, str]]) -> bool:
    """Whether `text` is whole in one of the files, raw or as a model reads it (`readable`)."""
    return any(text in raw or text in readable(path, raw) for path, raw in files)


def carried(
    history: Sequence[BaseMessage],
    kind: type[BaseMessage],
    index: FactIndex,
    sent_by_id: dict[str | None, str],
) -> bool:
    """Whether the last message of `kind` in the history is in the request intact: as itself, or
    its whole text inside another message (a summary quoting it)."""
    for j in range(len(history) - 1, -1, -1):
        if isinstance(history[j], kind):
            text = index.texts[j]
            return sent_by_id.get(history[j].id) == text or any(
                text in other for other in sent_by_id.values()
            )
    return True


def tally_thread(
    thread: Thread,
    threshold: int,
    meter: RealMeter,
    scratch: Path,
    make_model: Callable[[], Any],
    index: FactIndex,
    summary_timeout: float | None = None,
) -> ThreadResult:
    result = ThreadResult()
    if not reaches_threshold(thread, threshold):
        return result
    result.reaching = 1
    replays = replay_all(thread, threshold, scratch, make_model, summary_timeout)
    positions = [call.position for call in replays["ctxpress"].calls]
    for name, replay in replays.items():
        assert [call.position for call in replay.calls] == positions, name
        result.summaries[name] = len(replay.summaries)
    views = {name: FileView(name, scratch / name, replay) for name, replay in replays.items()}
    costs = Costs(meter)
    history_facts: set[str] = set()
    done = 0
    for call_index, position in enumerate(positions):
        for j in range(done, position):
            history_facts |= index.per_message[j]
        done = position
        if not any(
            call.level is not None or not same_messages(call.sent, thread.messages[:position])
            for call in (replay.calls[call_index] for replay in replays.values())
        ):
            continue
        for name, replay in replays.items():
            tally = measure_request(
                index, views[name], call_index, position, replay.calls[call_index].sent, history_facts, costs
            )
            result.tallies[name].add(tally)
    return result


def same_messages(sent: Sequence[BaseMessage], history: Sequence[BaseMessage]) -> bool:
    """The raw history, unchanged (the same objects: a middleware that did nothing passes them on)."""
    return len(sent) == len(history) and all(a is b for a, b in zip(sent, history, strict=True))


# --------------------------------------------------------------------------------------------------
# The run, the tables, the docs
# --------------------------------------------------------------------------------------------------


#: How long a real summary model may take, for every middleware (ctxpress' own default is 120 s).
REAL_SUMMARY_TIMEOUT_S = 900.0


@dataclass
class SummaryLog:
    """What a real summary model answered, per middleware: its replies and its errors."""

    replies: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    errors: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))


class SummaryRecorder(BaseCallbackHandler):
    """Writes one middleware's summary calls into a `SummaryLog`."""

    def __init__(self, log: SummaryLog, middleware: str) -> None:
        self.log = log
        self.middleware = middleware

    def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        self.log.replies[self.middleware].append(response.generations[0][0].text)

    def on_llm_error(self, error: BaseException, **kwargs: Any) -> None:
        self.log.errors[self.middleware].append(f"{type(error).__name__}: {str(error)[:160]}")


def openai_summary_model(url: str, name: str, max_tokens: int, log: SummaryLog) -> Callable[[], Any]:
    """A factory of summary models for an OpenAI-compatible server (temperature 0, no retries),
    each call logged; the middlewares are replayed in `PEERS` order, one model each."""
    from langchain_openai import ChatOpenAI

    made = 0

    def make() -> Any:
        nonlocal made
        middleware = PEERS[made % len(PEERS)]
        made += 1
        return ChatOpenAI(
            base_url=url,
            api_key="not-needed",
            model=name,
            temperature=0,
            max_tokens=max_tokens,
            timeout=REAL_SUMMARY_TIMEOUT_S,
            max_retries=0,
            callbacks=[SummaryRecorder(log, middleware)],
        )

    return make


def run(
    quick: bool,
    make_model: Callable[[], Any],
    thresholds: Sequence[int],
    sources: Sequence[str] | None,
    sets: Sequence[str],
    summary_timeout: float | None = None,
) -> dict[tuple[str, int, str], ThreadResult]:
    meter = RealMeter(load_real_tokenizer("cl100k").count)
    results: dict[tuple[str, int, str], ThreadResult] = defaultdict(lambda: ThreadResult(threads=0))
    for set_name, threads in replay_sets(quick).items():
        if set_name not in sets:
            continue
        chosen = [t for t in threads if sources is None or t.source in sources]
        for k in thresholds:
            started = time.perf_counter()
            for thread in chosen:
                index = FactIndex(thread)
                with tempfile.TemporaryDirectory(prefix="ctxpress-retention-") as scratch:
                    one = tally_thread(
                        thread, k * TOKENS_PER_K, meter, Path(scratch), make_model, index, summary_timeout
                    )
                groups = [thread.source, ALL, *([TOOL_HEAVY] if thread.source in TOOL_HEAVY_SOURCES else [])]
                for group in groups:
                    merge(results[(set_name, k, group)], one)
            print(
                f"{set_name} at {k}K: {len(chosen)} threads in {time.perf_counter() - started:.0f} s",
                flush=True,
            )
    return results


def merge(into: ThreadResult, one: ThreadResult) -> None:
    into.threads += one.threads
    into.reaching += one.reaching
    for name, tally in one.tallies.items():
        into.tallies[name].add(tally)
    for name, count in one.summaries.items():
        into.summaries[name] += count


def retention_table(
    results: dict[tuple[str, int, str], ThreadResult], set_name: str, thresholds: Sequence[int]
) -> list[str]:
    sources = sorted({key[2] for key in results if key[0] == set_name} - {TOOL_HEAVY, ALL})
    rows = []
    for k in thresholds:
        for group in [*sources, TOOL_HEAVY, ALL]:
            found = results.get((set_name, k, group))
            if found is None or not found.tallies.get("ctxpress"):
                continue
            for name in PEERS:
                t = found.tallies[name]
                rows.append(
                    [
                        f"{k}K",
                        group,
                        t.requests,
                        NAMES[name],
                        found.summaries[name],
                        f"{t.compressed_facts:,}",
                        share(t.verbatim, t.compressed_facts),
                        share(t.reachable, t.compressed_facts),
                        share(t.reachable_chained, t.compressed_facts),
                        f"{t.facts_in_view / t.requests:.0f} / {t.history_facts / t.requests:.0f}",
                        f"{t.tokens_real / t.requests:,.0f}",
                        f"{t.density:.1f}",
                        share(t.question_intact, t.requests),
                        share(t.tool_result_intact, t.with_tool_result),
                        share(t.tool_result_recoverable, t.with_tool_result),
                    ]
                )
    return table(
        [
            "threshold",
            "traces",
            "requests measured",
            "middleware",
            "summaries",
            "facts of compressed messages",
            "verbatim in request",
            "reachable, one read",
            "reachable, following references (any number of reads)",
            "facts in view / in history (mean per request)",
            "request tokens (cl100k, mean)",
            "facts in view per 1K tokens",
            "current question intact",
            "last tool result intact",
            "last tool result intact or whole in a named file (one read)",
        ],
        rows,
    )


def goal_lines(results: dict[tuple[str, int, str], ThreadResult], thresholds: Sequence[int]) -> list[str]:
    lines = []
    for set_name in ("conversations", "sessions"):
        for k in thresholds:
            found = results.get((set_name, k, TOOL_HEAVY))
            if found is None or not found.tallies.get("ctxpress"):
                continue
            ours = found.tallies["ctxpress"]
            best_name = max(("langchain", "deepagents"), key=lambda name: found.tallies[name].density)
            best = found.tallies[best_name]
            ratio = ours.density / best.density if best.density else float("inf")
            reachable = ours.reachable / ours.compressed_facts if ours.compressed_facts else 1.0
            lost = ours.requests - ours.question_intact
            verdicts = [
                f"density {ratio:.2f}× {NAMES[best_name]} (goal ≥ {GOAL_DENSITY_RATIO}×: "
                + ("met" if ratio >= GOAL_DENSITY_RATIO else "**missed**")
                + ")",
                f"reachable in one read {reachable:.1%} (goal 100%: "
                + ("met" if reachable == 1 else "**missed**")
                + ")",
                f"current question lost in {lost} of {ours.requests} requests (goal 0: "
                + ("met" if lost == 0 else "**missed**")
                + ")",
            ]
            lines.append(f"- {set_name}, {k}K: " + "; ".join(verdicts) + ".")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = bench_parser(__doc__, "first long session per data set only; no docs update")
    parser.add_argument(
        "--summary-model-url", help="an OpenAI-compatible server (…/v1) that writes every summary"
    )
    parser.add_argument("--summary-model-name", default="default", help="the model name sent to that server")
    parser.add_argument("--summary-max-tokens", type=int, default=512, help="the summary's length limit")
    parser.add_argument(
        "--thresholds", default=",".join(map(str, THRESHOLDS_K)), help="in K, comma-separated"
    )
    parser.add_argument("--sources", help="only these data sets (comma-separated), e.g. swe-agent,tau-bench")
    parser.add_argument("--sets", default="conversations,sessions", help="conversations, sessions or both")
    parser.add_argument(
        "--marker", default=None, help="docs section to write (default: retention, or retention_real)"
    )
    args = parser.parse_args(argv)
    thresholds = [int(k) for k in args.thresholds.split(",")]
    sources = args.sources.split(",") if args.sources else None
    make_model: Callable[[], Any] = InstantChatModel
    log: SummaryLog | None = None
    if args.summary_model_url:
        log = SummaryLog()
        make_model = openai_summary_model(
            args.summary_model_url, args.summary_model_name, args.summary_max_tokens, log
        )

    started = time.perf_counter()
    timeout = REAL_SUMMARY_TIMEOUT_S if log is not None else None
    results = run(args.quick, make_model, thresholds, sources, args.sets.split(","), timeout)
    elapsed = time.perf_counter() - started
    command = " ".join([COMMAND, *(argv if argv is not None else sys.argv[1:])])
    lines = report(results, thresholds, command, elapsed, log)
    print("\n".join(lines))
    if not args.no_docs and (not args.quick or args.summary_model_url):
        update_docs(args.marker or (f"{MARKER}_real" if args.summary_model_url else MARKER), lines)


def report(
    results: dict[tuple[str, int, str], ThreadResult],
    thresholds: Sequence[int],
    command: str,
    elapsed: float,
    log: SummaryLog | None,
) -> list[str]:
    title = "with a real summary model" if log is not None else "the same canned summary for all"
    model = (
        "a real model behind an OpenAI-compatible server writes every summary (temperature 0, the same "
        f"length limit for all three, no retries, ctxpress' summary timeout raised to the client's "
        f"{REAL_SUMMARY_TIMEOUT_S:.0f} s)"
        if log is not None
        else "every summary is the same canned text of the instant model (as in the L1-savings section), "
        "so a summary adds no fact: what is measured is what each middleware keeps raw, previews and "
        "writes to files"
    )
    lines = [
        f"## Retention: what the model still sees after compression ({title})",
        "",
        f"Reproduce: `{command}` ({elapsed:.0f} s here). The recorded conversations of the shared traces "
        "and the long sessions made from them (all six data sets, unless `--sources` / `--sets` / "
        "`--quick` in the command narrow them), replayed request by request through ctxpress, LangChain "
        "v1's `SummarizationMiddleware` and DeepAgents' summarization, configured as in the L1-savings "
        f"section (same trigger in tokens, keep 10 messages); {model}.",
        "",
        "Facts (`ctxpress.tools.facts`, rules in its docstring): URLs; file paths (rooted, relative with "
        "an extension, bare file names with a common extension); identifiers (UUIDs, dates, hex hashes of "
        "7-64 digits, ticket keys `ABC-123`, `#1234`, letter-digit codes such as `mia_li_3668` or "
        "`JG7FMM`, runs of 6+ digits); numbers with a unit or currency sign (`$18.47`, `300元`, "
        "`45.5 MB`); error lines (exception names, `Traceback`, `error:`, `FAILED`, `失败`, `错误` …); "
        "and, from the user's own messages, sentences with an explicit instruction (`must`, `do not`, "
        "`only`, `必须`, `不要` …). A fact is its text; it is *in view* when that text occurs in the "
        "request (system prompt, messages, tool-call arguments).",
        "",
        "Measured at every request where at least one middleware sends something other than the raw "
        "history, the same requests for all three. *Facts of compressed messages*: of the recorded "
        "messages before the request that the middleware does not send intact (summarised, offloaded, "
        "arguments cut); *verbatim*: in view; *one read*: in view or in a file the request names, read "
        "whole (ctxpress: offloaded results and the history file; DeepAgents: its history file as it was "
        "then; LangChain keeps none); *following references*: also in files those files name, at any "
        "depth. *Facts in view per 1K tokens*: every fact of the history before the request that is in "
        "view, per 1,000 cl100k tokens of the request, summed over requests. *Intact*: the last user "
        "message and the last tool result occur whole in the request; *or whole in a named file*: the "
        "last tool result is intact or its whole text is in a file the request names (S8 offloads every "
        "result over the limit, the newest one included, leaving a preview and the file's path).",
    ]
    for set_name, heading in (("conversations", "Recorded conversations"), ("sessions", "Long sessions")):
        rows = retention_table(results, set_name, thresholds)
        if len(rows) > 2:
            lines += ["", f"### {heading}", "", *rows]
    lines += ["", "Goal (tool-heavy traces, ctxpress):", "", *goal_lines(results, thresholds)]
    if log is not None:
        lines += ["", "What the summary model answered:", "", *summary_lines(log)]
    return lines


def summary_lines(log: SummaryLog) -> list[str]:
    lines = []
    for name in PEERS:
        replies, errors = log.replies[name], log.errors[name]
        sample = next((reply for reply in replies if reply.strip()), "")
        mean = sum(len(reply) for reply in replies) / len(replies) if replies else 0
        line = f"- {NAMES[name]}: {len(replies)} replies (mean {mean:.0f} characters), {len(errors)} errors"
        if errors:
            line += f" (first: `{errors[0]}`)"
        if sample:
            line += " -- first reply: " + json.dumps(sample[:300], ensure_ascii=False)
        lines.append(line)
    return lines


if __name__ == "__main__":
    main()
