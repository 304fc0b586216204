"""What a summary carries besides its summary (issue 21), through a real `create_agent` graph:

- the current question: one user request followed by many large tool calls (the SWE-agent /
  OpenHands shape) -- after several summaries (S14) every model request still holds its text;
- one-read reachability: every fact of a compressed message is in the request, or in a file whose
  path the request names, read once (S7 offloads, S14 history files and the thread's conversation
  file; without the conversation file, the list of earlier files).
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from ctxpress import CompressionConfig, ContextCompressionMiddleware, LocalWorkdir
from ctxpress.compaction.content import content_text
from ctxpress.summary.carried import QUESTION_HEADING
from ctxpress.summary.event import EVENT_KEY, is_summary_message
from ctxpress.summary.history import is_conversation_file, read_history
from ctxpress.summary.references import REFERENCES_HEADING
from ctxpress.workdir import WorkdirError, read_text
from tests.fakes import ScriptedChatModel, tool_call
from tests.middleware.conftest import assert_provider_valid

THREAD = {"configurable": {"thread_id": "swe-1"}}
QUESTION = (
    "Fix the failing test in tests/test_parser.py: parse_header must accept a trailing comma, "
    "and do not change the public API of src/parser.py."
)
CALLS = 24
#: Any path the request names that a model could read in one call.
NAMED_PATH = re.compile(
    r"outputs/(?:large_tool_results|large_tool_arguments|conversation_history)/[A-Za-z0-9_.-]+"
)


def fact(number: int) -> str:
    """The one line of source file `number` that the test looks for later."""
    return f"FACT-{number:03d}-{number * 7919:08d}"


@tool
def read_source(path: str, number: int) -> str:
    """Read a source file of the repository."""
    filler = "\n".join(f"    value_{line} = compute({line}, {number})  # {path}" for line in range(120))
    return f"# {path}\n{filler}\n# marker {fact(number)}\n{filler}"


def swe_script(calls: int) -> list[AIMessage]:
    """One request answered by `calls` file reads, then a reply."""
    script = [
        tool_call("read_source", {"path": f"src/module_{n}.py", "number": n}, f"read-{n}")
        for n in range(calls)
    ]
    return [*script, AIMessage(content="The trailing comma is now accepted.")]


def build(model: Any, workdir: LocalWorkdir, checkpointer: Any, config: CompressionConfig) -> Any:
    middleware = ContextCompressionMiddleware(config, workdir=workdir, summary_model=ScriptedChatModel())
    return create_agent(
        model,
        [read_source],
        system_prompt="You fix bugs.",
        middleware=[middleware],
        checkpointer=checkpointer,
    )


def request_text(request: list[BaseMessage]) -> str:
    parts = []
    for message in request:
        parts.append(content_text(message.content))
        if isinstance(message, AIMessage):
            parts.extend(json.dumps(call["args"]) for call in message.tool_calls)
    return "\n".join(parts)


CONFIG = CompressionConfig(summary_threshold=3, summary_keep_messages=6, summary_tool_result_token_limit=300)


def long_question(constraints: int) -> str:
    """A request with `constraints` numbered constraints (about 18 tokens each)."""
    return (
        "Fix the failing test in tests/test_parser.py without changing src/parser.py's public API. "
        + " ".join(
            f"Constraint {n}: field_{n:03d} must stay at offset {n * 8} bytes." for n in range(constraints)
        )
        + " END-OF-REQUEST"
    )


def long_system_prompt(rules: int) -> str:
    return "You fix bugs. " + " ".join(f"Rule {n}: keep the diff minimal." for n in range(rules))


def swe_run(
    workdir: LocalWorkdir, checkpointer: Any, system_prompt: str, question: str
) -> tuple[ScriptedChatModel, ContextCompressionMiddleware, Any]:
    """The SWE-shaped turn (`swe_script`) under `system_prompt`, asked `question`, run to its end."""
    model = ScriptedChatModel(script=swe_script(CALLS))
    middleware = ContextCompressionMiddleware(CONFIG, workdir=workdir, summary_model=ScriptedChatModel())
    agent = create_agent(
        model, [read_source], system_prompt=system_prompt, middleware=[middleware], checkpointer=checkpointer
    )
    agent.invoke({"messages": [HumanMessage(content=question)]}, THREAD)
    return model, middleware, agent


def under_threshold(middleware: ContextCompressionMiddleware, request: list[BaseMessage]) -> bool:
    """Whether the request the model received (system prompt first) is below the threshold."""
    counter = middleware.token_counter
    return (
        counter.count_request(request[1:], request[0], None, CONFIG.token_profile) < CONFIG.threshold_tokens
    )


def test_s14_current_question_survives_many_summaries(workdir: LocalWorkdir, checkpointer: Any) -> None:
    model = ScriptedChatModel(script=swe_script(CALLS))
    agent = build(model, workdir, checkpointer, CONFIG)
    agent.invoke({"messages": [HumanMessage(content=QUESTION)]}, THREAD)

    event = agent.get_state(THREAD).values[EVENT_KEY]
    assert event["summary_count"] >= 3, "the premise: several summaries passed the question"
    summarised_requests = [r for r in model.requests if any(is_summary_message(m) for m in r)]
    assert summarised_requests and all(
        not any(m.content == QUESTION and not is_summary_message(m) for m in r)
        for r in summarised_requests[-3:]
    ), "the premise: the question itself is summarised away"
    for request in model.requests:
        assert_provider_valid(request[1:])
        assert QUESTION in request_text(request)
    summary = content_text(event["summary_message"].content)
    assert f"{QUESTION_HEADING}\n{QUESTION}" in summary


def test_s14_newer_user_message_ends_the_carried_question(workdir: LocalWorkdir, checkpointer: Any) -> None:
    model = ScriptedChatModel(script=[*swe_script(CALLS), *swe_script(CALLS)])
    agent = build(model, workdir, checkpointer, CONFIG)
    agent.invoke({"messages": [HumanMessage(content=QUESTION)]}, THREAD)
    follow_up = "Now also accept a trailing semicolon in parse_footer."
    agent.invoke({"messages": [HumanMessage(content=follow_up)]}, THREAD)

    last = model.requests[-1]
    assert follow_up in request_text(last)
    summary = content_text(agent.get_state(THREAD).values[EVENT_KEY]["summary_message"].content)
    assert f"{QUESTION_HEADING}\n{follow_up}" in summary
    assert f"{QUESTION_HEADING}\n{QUESTION}" not in summary


def test_s14_very_long_question_is_bounded_and_whole_in_the_history_file(
    workdir: LocalWorkdir, checkpointer: Any
) -> None:
    long_question = "Please fix this. " + " ".join(f"step{n:05d}" for n in range(4000)) + " END-OF-REQUEST"
    model = ScriptedChatModel(script=swe_script(CALLS))
    agent = build(model, workdir, checkpointer, CONFIG.model_copy(update={"summary_threshold": 6}))
    agent.invoke({"messages": [HumanMessage(content=long_question)]}, THREAD)

    event = agent.get_state(THREAD).values[EVENT_KEY]
    summary = content_text(event["summary_message"].content)
    section = summary.split(QUESTION_HEADING, 1)[1]
    assert section.startswith("\nPlease fix this. step00000") and "END-OF-REQUEST" in section
    assert "step02000" not in section and len(section) < len(long_question) // 2
    where = re.search(r"left out; the full text is in (\S+) …", section)
    assert where is not None
    _, messages = read_history(workdir, where.group(1))
    assert any(m.content == long_question for m in messages)


def readable_from(workdir: LocalWorkdir, text: str) -> str:
    """The request's text and every file it names, each read once."""
    paths = {path.rstrip(".") for path in NAMED_PATH.findall(text)}
    return text + "".join(read_text(workdir, path) for path in paths)


def test_s14_every_compressed_fact_is_one_read_away_however_many_summaries(
    workdir: LocalWorkdir, checkpointer: Any
) -> None:
    """The summary names the thread's conversation file, which holds every message before the
    cutoff whole: every compressed fact is in the request or in one file it names, in every
    request, however many history and offload files the thread has gathered."""
    model = ScriptedChatModel(script=swe_script(CALLS * 2))
    agent = build(model, workdir, checkpointer, CONFIG)
    agent.invoke({"messages": [HumanMessage(content=QUESTION)]}, THREAD)

    state = agent.get_state(THREAD).values
    event = state[EVENT_KEY]
    assert event["summary_count"] >= 5, "the premise: facts sit in many history and offload files"
    assert len(event["earlier_files"]) > 20, "the premise: more files than a summary could list"
    for answered, request in enumerate(model.requests):
        readable = readable_from(workdir, request_text(request))
        for number in range(answered):
            assert fact(number) in readable, f"{fact(number)} is not one read away in request {answered}"
    summary = content_text(event["summary_message"].content)
    named = [path.rstrip(".") for path in NAMED_PATH.findall(summary)]
    # Issue 44 item 5: this summary's history file (S15) and the conversation file, no list of files.
    assert named == [event["file_path"], named[1]] and is_conversation_file(named[1]), named
    assert f"every earlier message is in full at {named[1]}." in summary
    header, messages = read_history(workdir, named[1])
    cutoff = event["cutoff_index"]
    assert header["range"] == [0, cutoff] and event["file_path"] in header["history_files"]
    assert [(m.id, m.content) for m in messages] == [(m.id, m.content) for m in state["messages"][:cutoff]]


class ConversationFileRefused(LocalWorkdir):
    """A workdir (real files) that refuses the conversation file, as a full quota would."""

    def write_bytes(self, path: str, data: bytes) -> str:
        if is_conversation_file(path):
            raise WorkdirError(f"{path}: the workdir is full")
        return super().write_bytes(path, data)


@pytest.fixture
def listing_workdir(tmp_path: Path) -> LocalWorkdir:
    """The workdir of the tests of the fallback: the summary lists the earlier files."""
    return ConversationFileRefused(tmp_path / "listing-workdir")


def test_every_compressed_fact_is_one_read_away(listing_workdir: LocalWorkdir, checkpointer: Any) -> None:
    """Without the conversation file: one read while the list of earlier files fits its budget;
    past it, the summary names the history file whose header lists the older ones (then two reads,
    never lost)."""
    workdir = listing_workdir
    model = ScriptedChatModel(script=swe_script(CALLS))
    agent = build(model, workdir, checkpointer, CONFIG)
    agent.invoke({"messages": [HumanMessage(content=QUESTION)]}, THREAD)

    event = agent.get_state(THREAD).values[EVENT_KEY]
    assert event["summary_count"] >= 3, "the premise: facts sit in several history files"
    one_read, via_header = 0, 0
    # Request k follows the first k file reads (one call per model turn).
    for answered, request in enumerate(model.requests):
        text = request_text(request)
        readable = readable_from(workdir, text)
        overflow = re.search(r"older files are listed in the header of (\S+) \(earlier_files\)", text)
        if overflow is None:
            one_read += sum(1 for m in request if is_summary_message(m))
        else:
            header, _ = read_history(workdir, overflow.group(1))
            earlier = header["earlier_files"]
            assert isinstance(earlier, list) and earlier
            readable += "".join(readable_from(workdir, path) for path in earlier)
            via_header += 1
        for number in range(answered):
            assert fact(number) in readable, f"{fact(number)} is not reachable in request {answered}"
    assert one_read >= 3 and via_header >= 1, "the premise: both the listed and the overflow case ran"


#: A question of about 480 tokens: within its own budget (a quarter of the threshold) and within
#: the room the request leaves, but more than half of that room.
LONG_QUESTION = long_question(26)
LONG_SYSTEM_PROMPT = long_system_prompt(90)


def test_s14_question_that_fits_the_free_room_is_quoted_whole(
    workdir: LocalWorkdir, checkpointer: Any
) -> None:
    """The quote may take all the room the request leaves (the next exchange already reserved),
    not only the margin the list of earlier files is bounded by: a question that fits whole is
    never cut."""
    model, middleware, agent = swe_run(workdir, checkpointer, LONG_SYSTEM_PROMPT, LONG_QUESTION)

    event = agent.get_state(THREAD).values[EVENT_KEY]
    assert event["summary_count"] >= 2, "the premise: summaries passed the question"
    summarised = [r for r in model.requests if any(is_summary_message(m) for m in r)]
    assert summarised, "the premise: requests after a summary"
    for request in summarised:
        assert LONG_QUESTION in request_text(request)
        assert under_threshold(middleware, request), "the quote never keeps a request over the threshold"
    # The next exchange is reserved before the quote takes its room: a fresh summary is never
    # followed by another at the very next call.
    shown = [request[1].id for request in summarised]  # each summary message has an id of its own
    fresh = [n for n in range(1, len(shown)) if shown[n] != shown[n - 1]]
    assert fresh and all(b - a > 1 for a, b in itertools.pairwise(fresh)), "two summaries in a row"


def test_s14_file_list_names_history_files_before_offload_files(
    listing_workdir: LocalWorkdir, checkpointer: Any
) -> None:
    """When the list of earlier files cannot hold them all, the earlier history files (a whole
    summarised span each) are named before any offload file (one result each), newest first: an
    offload file is named only when every history file is, and the history files left out are
    the oldest."""
    workdir = listing_workdir
    model = ScriptedChatModel(script=swe_script(CALLS * 2))
    agent = build(model, workdir, checkpointer, CONFIG)
    agent.invoke({"messages": [HumanMessage(content=QUESTION)]}, THREAD)

    event = agent.get_state(THREAD).values[EVENT_KEY]
    summary = content_text(event["summary_message"].content)
    earlier = event["earlier_files"]
    histories = [path for path in earlier if path.startswith("outputs/conversation_history/")]
    offloads = [path for path in earlier if path.startswith("outputs/large_tool_results/")]
    assert len(histories) >= 3 and offloads, "the premise: several history files and offload files"
    assert "older files are listed in the header of" in summary, "the premise: not every file fits"
    assert any(path not in summary for path in offloads), "the premise: some offload files are left out"
    named = [path in summary for path in histories]  # oldest first
    assert any(named), "no history file is named"
    assert named == sorted(named), f"a newer history file is left out before an older one: {named}"
    if any(path in summary for path in offloads):
        assert all(named), "an offload file is named while a history file is not"


def test_s14_overflowing_file_list_still_names_the_files_that_fit(
    listing_workdir: LocalWorkdir, checkpointer: Any
) -> None:
    """The line saying where the unlisted files are counts against the list's budget: a list that
    overflows keeps the paths that fit beside it instead of falling back to that line alone."""
    workdir = listing_workdir
    model = ScriptedChatModel(script=swe_script(CALLS * 2))
    agent = build(model, workdir, checkpointer, CONFIG)
    agent.invoke({"messages": [HumanMessage(content=QUESTION)]}, THREAD)

    summaries = {
        content_text(message.content)
        for request in model.requests
        for message in request
        if is_summary_message(message)
    }
    overflowed = [text for text in summaries if "older files are listed in the header of" in text]
    assert len(overflowed) >= 3, "the premise: the list overflowed in several summaries"
    for text in overflowed:
        section = text.split("## Earlier files of this conversation", 1)[1]
        listed = [line for line in section.splitlines() if line.startswith("- outputs/")]
        assert len(listed) >= 3, f"only {len(listed)} files listed beside the overflow line"


@pytest.mark.parametrize("files", ["conversation file", "list"])
def test_s14_whole_question_leaves_room_for_the_file_list(
    workdir: LocalWorkdir, listing_workdir: LocalWorkdir, checkpointer: Any, files: str
) -> None:
    """A question quoted whole past the files' share of the free room does not push the earlier
    files out: the summary names the conversation file (in its first line), or, without one, the
    list takes its share of what the question leaves."""
    workdir = workdir if files == "conversation file" else listing_workdir
    model, _, _ = swe_run(workdir, checkpointer, LONG_SYSTEM_PROMPT, LONG_QUESTION)

    summaries = {
        message.id: content_text(message.content)
        for request in model.requests
        for message in request
        if is_summary_message(message)
    }
    assert len(summaries) >= 2, "the premise: several summaries"
    for text in summaries.values():
        assert LONG_QUESTION in text, "the premise: the question is quoted whole"
        named = [path.rstrip(".") for path in NAMED_PATH.findall(text)]
        if files == "conversation file":  # its own history file and the conversation file
            assert len(named) == 2 and is_conversation_file(named[1]) and not is_conversation_file(named[0])
        else:
            assert len(named) >= 2, "the summary names its own history file and at least one earlier file"


#: A question within its own budget (a quarter of the threshold) that the room beside the summary,
#: the system prompt and `summary_keep_messages` kept messages cannot hold.
ROOMLESS_QUESTION = long_question(30)
ROOMLESS_SYSTEM_PROMPT = long_system_prompt(150)


def test_s14_question_is_quoted_whole_by_keeping_fewer_messages(
    workdir: LocalWorkdir, checkpointer: Any
) -> None:
    """When the system prompt, the summary and the kept messages leave too little room for the
    question the summary passes, the summary keeps fewer messages (S14 keeps them "preferably")
    instead of cutting the question: the current request is never lost."""
    model, middleware, agent = swe_run(workdir, checkpointer, ROOMLESS_SYSTEM_PROMPT, ROOMLESS_QUESTION)

    summarised = [r for r in model.requests if any(is_summary_message(m) for m in r)]
    assert summarised, "the premise: requests after a summary"
    kept_counts = [len(request) - 2 for request in summarised]  # less the system prompt and summary
    assert min(kept_counts) < CONFIG.summary_keep_messages, "the premise: fewer messages kept"
    for request in summarised:
        assert_provider_valid(request[1:])
        assert ROOMLESS_QUESTION in request_text(request)
        assert under_threshold(middleware, request)
    # Every summarised message is in the history file the latest summary names (nothing lost).
    event = agent.get_state(THREAD).values[EVENT_KEY]
    _, history = read_history(workdir, event["file_path"])
    assert history, "the latest summary's history file holds its span"


def order_id(number: int) -> str:
    return f"W{number * 7919 + 1000000:07d}"


@tool
def look_up_order(number: int) -> str:
    """Look up an order of the shop's database."""
    before = "\n".join(f"log line {line}: cache warm, nothing to report" for line in range(30))
    after = "\n".join(f"log line {line}: shipment scan recorded" for line in range(30, 150))
    failure = f"KeyError: 'refund_state' while reading exports/order_{number}.json"
    return f"{before}\norder {order_id(number)} found\n{failure}\n{after}"


def test_s14_summary_shows_the_references_its_span_and_previews_dropped(
    workdir: LocalWorkdir, checkpointer: Any
) -> None:
    """Each order id and error line sits in the first fifth of a long tool result: the S8 preview
    (head, middle, tail) drops it and the summary model (scripted) never names it. After a summary
    the request still shows the newest summarised one verbatim, in the summary message's
    references section, and the request stays below the threshold."""
    calls = 30
    script = [tool_call("look_up_order", {"number": n}, f"order-{n}") for n in range(calls)]
    model = ScriptedChatModel(script=[*script, AIMessage(content="All orders checked.")])
    middleware = ContextCompressionMiddleware(CONFIG, workdir=workdir, summary_model=ScriptedChatModel())
    agent = create_agent(
        model,
        [look_up_order],
        system_prompt="You check orders.",
        middleware=[middleware],
        checkpointer=checkpointer,
    )
    agent.invoke({"messages": [HumanMessage(content="Check every order for a refund problem.")]}, THREAD)

    assert agent.get_state(THREAD).values[EVENT_KEY]["summary_count"] >= 2, "the premise: several summaries"
    summarised_in = 0
    sections: list[str] = []  # each summary's section, in order
    for answered, request in enumerate(model.requests):  # request `answered` follows `answered` results
        in_view = {m.tool_call_id for m in request if isinstance(m, ToolMessage)}
        summarised = [n for n in range(answered) if f"order-{n}" not in in_view]
        if not summarised:
            continue
        summarised_in += 1
        assert under_threshold(middleware, request)
        summary = next(content_text(m.content) for m in request if is_summary_message(m))
        assert REFERENCES_HEADING in summary
        section = summary.split(REFERENCES_HEADING, 1)[1]
        newest = max(summarised)
        others = request_text([m for m in request if not is_summary_message(m)])
        assert order_id(newest) not in others, "the premise: no preview keeps it"
        assert f"- {order_id(newest)}\n" in section
        assert f"- KeyError: 'refund_state' while reading exports/order_{newest}.json" in section
        if not sections or sections[-1] != section:
            sections.append(section)
    assert summarised_in >= 4
    assert len(sections) >= 3
    for earlier, later in itertools.pairwise(sections):
        carried = [n for n in range(calls) if order_id(n) in earlier and order_id(n) in later]
        assert carried, "the next summary lists no reference of the one before (cumulative, room allowing)"
