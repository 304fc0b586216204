"""How much of what left the model's view can be read back: ctxpress vs. its peers on every replay
(issue "Benchmarks side by side with the peers, on real conversations", goal 3).

    .venv/bin/python bench/recoverability.py           # full run, updates docs/benchmarks.md
    .venv/bin/python bench/recoverability.py --quick   # first long session per source only, no docs

The replays of `l1_savings.py` (every real conversation that reaches the threshold, and long
sessions of concatenated conversations; 8K, 32K and 100K), and after each one:

- ctxpress: every summary's history file through `ctxpress.summary.recovery.recover_messages`
  (which also reads back the offloaded results the history names), compared message by message
  with the original messages of the summarised range; and every tool result L1 offloaded, read back
  from the file its view names (`parse_offload_reference`) and compared with the original result.
- DeepAgents: its history file (`/conversation_history/<session>.md` on the `FilesystemBackend`),
  searched for each summarised message's text and tool-call arguments as it writes them
  (XML-escaped, so they can be unescaped back).
- LangChain: its `RemoveMessage(REMOVE_ALL)` update deletes the summarised messages from the state
  and writes nothing; we look for them in the final state.

Bytes are UTF-8 bytes of message text plus tool-call arguments as JSON; a part counts as recovered
only when it is given back exactly. Goal: ctxpress recovers 100% of summarised and offloaded bytes.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

from langchain_core.messages import BaseMessage, ToolMessage

from common import (
    PEERS,
    THRESHOLDS_K,
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
from ctxpress.compaction.content import content_text
from ctxpress.compaction.markers import parse_offload_reference
from ctxpress.config import TOKENS_PER_K
from ctxpress.summary.event import is_summary_message
from ctxpress.summary.recovery import RecoveryError, recover_messages
from ctxpress.workdir import LocalWorkdir, WorkdirError, decode_text

MARKER = "recoverability"
COMMAND = ".venv/bin/python bench/recoverability.py"


def _text_bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _parts(message: BaseMessage) -> list[str]:
    """The recoverable parts of a message: its text, then each tool call's JSON arguments."""
    calls = getattr(message, "tool_calls", None) or ()
    return [content_text(message.content), *(json.dumps(c["args"], ensure_ascii=False) for c in calls)]


def total_bytes(message: BaseMessage) -> int:
    return sum(_text_bytes(part) for part in _parts(message))


def lf(text: str) -> str:
    """Line endings normalised to LF (what a text-mode read-modify-write leaves)."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def same_bytes(original: BaseMessage, recovered: BaseMessage | None, *, normalise: bool = False) -> int:
    """Bytes of `original` that `recovered` gives back exactly (or up to line endings), part by part."""
    if recovered is None:
        return 0
    given = _parts(recovered)
    fold = lf if normalise else str
    return sum(
        _text_bytes(part)
        for index, part in enumerate(_parts(original))
        if index < len(given) and fold(given[index]) == fold(part)
    )


@dataclass
class Ledger:
    """Summarised and offloaded bytes of one middleware, and how many came back."""

    summarised: int = 0
    summarised_back: int = 0
    summarised_back_lf: int = 0  # read back up to line endings (CRLF / CR vs LF)
    offloaded: int = 0
    offloaded_back: int = 0
    summaries: int = 0
    files_missing: int = 0

    def add(self, other: Ledger) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


def ranges(cutoffs: Sequence[int]) -> list[tuple[int, int]]:
    """Summarised ranges of the state from the cumulative cutoffs of successive summaries."""
    spans, start = [], 0
    for cutoff in cutoffs:
        spans.append((start, cutoff))
        start = cutoff
    return spans


def ours(thread: Thread, replay: Replay, root: Path) -> Ledger:
    ledger = Ledger(summaries=len(replay.summaries))
    workdir = LocalWorkdir(root)
    by_id = {m.id: m for m in thread.messages}
    events = replay.summaries
    for event, (start, end) in zip(events, ranges([e["cutoff_index"] for e in events]), strict=True):
        originals = thread.messages[start:end]
        ledger.summarised += sum(total_bytes(m) for m in originals)
        recovered: dict[str | None, BaseMessage] = {}
        if event.get("file_path"):
            try:
                messages = recover_messages(workdir, event["file_path"])
                recovered = {m.id: m for m in messages if not is_summary_message(m)}
            except (RecoveryError, WorkdirError):
                ledger.files_missing += 1
        else:
            ledger.files_missing += 1
        ledger.summarised_back += sum(same_bytes(m, recovered.get(m.id)) for m in originals)
        ledger.summarised_back_lf += sum(
            same_bytes(m, recovered.get(m.id), normalise=True) for m in originals
        )
    seen: set[str | None] = set()
    for call in replay.calls:
        for shown in call.sent:
            if not isinstance(shown, ToolMessage) or shown.id in seen:
                continue
            reference = parse_offload_reference(content_text(shown.content))
            original = by_id.get(shown.id)
            if reference is None or original is None:
                continue
            seen.add(shown.id)
            text = content_text(original.content)
            ledger.offloaded += _text_bytes(text)
            try:
                if decode_text(workdir.read_bytes(reference.path)) == text:
                    ledger.offloaded_back += _text_bytes(text)
            except WorkdirError:
                ledger.files_missing += 1
    return ledger


def deepagents(thread: Thread, replay: Replay, root: Path) -> Ledger:
    ledger = Ledger(summaries=len(replay.summaries))
    files: dict[str, str] = {}
    events = replay.summaries
    for event, (start, end) in zip(events, ranges([e["cutoff_index"] for e in events]), strict=True):
        originals = thread.messages[start:end]
        ledger.summarised += sum(total_bytes(m) for m in originals)
        path = event.get("file_path")
        if not path:
            ledger.files_missing += 1
            continue
        if path not in files:
            local = root / path.lstrip("/")
            files[path] = local.read_bytes().decode("utf-8") if local.is_file() else ""
            ledger.files_missing += 0 if local.is_file() else 1
        text = files[path]
        folded = lf(text)
        for message in originals:
            for part in _parts(message):
                if part and escape(part) in text:
                    ledger.summarised_back += _text_bytes(part)
                if part and lf(escape(part)) in folded:
                    ledger.summarised_back_lf += _text_bytes(part)
    return ledger


def langchain(replay: Replay) -> Ledger:
    ledger = Ledger(summaries=len(replay.summaries))
    final = {m.id: m for m in replay.state_messages}
    for update in replay.summaries:
        removed = [m for m in update["removed"] if m.additional_kwargs.get("lc_source") != "summarization"]
        ledger.summarised += sum(total_bytes(m) for m in removed)
        ledger.summarised_back += sum(same_bytes(m, final.get(m.id)) for m in removed)
        ledger.summarised_back_lf += sum(same_bytes(m, final.get(m.id), normalise=True) for m in removed)
    return ledger


@dataclass
class Result:
    threads: int = 0
    replayed: int = 0
    ledgers: dict[str, Ledger] = field(default_factory=lambda: defaultdict(Ledger))


def run(quick: bool) -> dict[tuple[str, int], Result]:
    results: dict[tuple[str, int], Result] = defaultdict(Result)
    for set_name, threads in replay_sets(quick).items():
        for k in THRESHOLDS_K:
            started = time.perf_counter()
            result = results[(set_name, k)]
            for thread in threads:
                result.threads += 1
                threshold = k * TOKENS_PER_K
                if not reaches_threshold(thread, threshold):
                    continue
                result.replayed += 1
                with tempfile.TemporaryDirectory(prefix="ctxpress-recover-") as scratch:
                    root = Path(scratch)
                    replays = replay_all(thread, threshold, root)
                    result.ledgers["ctxpress"].add(ours(thread, replays["ctxpress"], root / "ctxpress"))
                    result.ledgers["deepagents"].add(
                        deepagents(thread, replays["deepagents"], root / "deepagents")
                    )
                    result.ledgers["langchain"].add(langchain(replays["langchain"]))
            print(
                f"{set_name} at {k}K: {len(threads)} threads in {time.perf_counter() - started:.0f} s",
                flush=True,
            )
    return results


NAMES = {"ctxpress": "ctxpress", "langchain": "LangChain", "deepagents": "DeepAgents"}


def render(results: dict[tuple[str, int], Result]) -> list[str]:
    rows = []
    for (set_name, k), result in results.items():
        if not result.replayed:
            continue
        for name in PEERS:
            ledger = result.ledgers[name]
            both = ledger.summarised + ledger.offloaded
            back = ledger.summarised_back + ledger.offloaded_back
            rows.append(
                [
                    set_name,
                    f"{k}K",
                    f"{result.replayed} / {result.threads}",
                    NAMES[name],
                    ledger.summaries,
                    f"{ledger.summarised:,}",
                    share(ledger.summarised_back, ledger.summarised),
                    share(ledger.summarised_back_lf, ledger.summarised),
                    f"{ledger.offloaded:,}",
                    share(ledger.offloaded_back, ledger.offloaded),
                    share(back, both),
                    ledger.files_missing,
                ]
            )
    return table(
        [
            "replays",
            "threshold",
            "threads replayed / all",
            "middleware",
            "summaries",
            "summarised bytes",
            "read back",
            "read back up to line endings",
            "offloaded bytes",
            "read back",
            "all read back",
            "files missing",
        ],
        rows,
    )


def verdict(results: dict[tuple[str, int], Result]) -> list[str]:
    total = Ledger()
    for result in results.values():
        total.add(result.ledgers["ctxpress"])
    both = total.summarised + total.offloaded
    back = total.summarised_back + total.offloaded_back
    if not both:
        return ["Nothing was summarised or offloaded: the goal cannot be judged."]
    met = back == both and not total.files_missing
    return [
        f"ctxpress, all replays: {back:,} of {both:,} bytes read back ({back / both:.4%}); "
        f"goal (100%) {'met' if met else '**missed**'}."
    ]


def main(argv: list[str] | None = None) -> None:
    parser = bench_parser(__doc__, "first long session per source only; no docs update")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    results = run(args.quick)
    lines = [
        "## Recoverability of summarised and offloaded content",
        "",
        f"Reproduce: `{COMMAND}` ({time.perf_counter() - started:.0f} s here; `--quick`: first long session of "
        "each data set only). The replays of the L1 savings section (same middlewares, settings and "
        "instant summary model). ctxpress: each history file through `recover_messages` (history + "
        "the offloaded results it names), and each offloaded tool result read back from its file. "
        "DeepAgents: its `conversation_history/<session>.md` searched for each summarised message's "
        "text and tool-call arguments as it writes them (XML-escaped, reversible). LangChain: "
        "summarised messages looked for in the final state (it deletes them with "
        "`RemoveMessage(REMOVE_ALL)` and writes no file; only older checkpoints, where a checkpointer "
        "keeps history, still hold them). Bytes: UTF-8 of message text plus tool-call arguments as "
        "JSON, counted as read back only when given back exactly; the column beside it also accepts "
        "CRLF / CR given back as LF. DeepAgents appends each later summary to its history file with "
        "`FilesystemBackend.edit`, which reads the file in text mode and normalises every CRLF / CR to "
        "LF, so text with CR (SWE-agent's shell output, some issue texts) is no longer byte-exact after "
        "the second summary of a thread; with one summary per thread it gives back everything.",
        "",
        *render(results),
        "",
        *(
            f"No {set_name[:-1]} reaches {k}K: nothing to recover there."
            for (set_name, k), result in results.items()
            if not result.replayed
        ),
        "",
        *verdict(results),
    ]
    print("\n".join(lines))
    if not (args.quick or args.no_docs):
        update_docs(MARKER, lines)


if __name__ == "__main__":
    main()
