"""Issue 44: rules that read untrusted shapes, generated (Hypothesis), with the invariant each keeps.

- A history file (S14, S27) gives back every message it was written with, whatever characters
  the messages hold: line and paragraph separators, NUL, CJK, emoji.
- A cutoff (S14) never separates a tool result from the latest call of its id before it, also when
  a provider reuses tool-call ids in every AI message.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from ctxpress.summary.cutoff import choose_cutoff, unsafe_cutoffs
from ctxpress.summary.history import HistoryRange, read_history, write_history
from ctxpress.workdir import LocalWorkdir

#: Characters `str.splitlines` splits at besides "\n", which JSON does not escape.
LINE_BREAKERS = "\u2028\u2029\u0085\x1c\x1d\x1e\x0b\x0c\r"
TEXTS = st.text(
    alphabet=st.one_of(
        st.sampled_from([*LINE_BREAKERS, "\n", "\x00", "汉", "🙂", '"', "\\"]),
        st.characters(exclude_categories=["Cs"]),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(TEXTS, min_size=1, max_size=5))
def test_a_history_file_gives_back_every_message_whatever_it_holds(tmp_path: Path, texts: list[str]) -> None:
    workdir = LocalWorkdir(tmp_path / "history")
    messages: list[BaseMessage] = [HumanMessage(text, id=f"m{index}") for index, text in enumerate(texts)]
    path = write_history(workdir, HistoryRange("t", 0, len(messages)), messages)
    _header, read = read_history(workdir, path)
    assert [(m.id, m.content) for m in read] == [(m.id, m.content) for m in messages]


def _turn(index: int, calls: int, result: str) -> list[BaseMessage]:
    """A turn whose AI message calls `calls` tools with ids reused by every turn (`call_0`, …)."""
    ids = [f"call_{n}" for n in range(calls)]
    ai = AIMessage("", id=f"ai{index}", tool_calls=[{"name": "search", "args": {}, "id": i} for i in ids])
    return [HumanMessage(f"q{index}"), ai, *(ToolMessage(result, tool_call_id=i) for i in ids)]


@settings(max_examples=100, deadline=None)
@given(
    turns=st.lists(st.tuples(st.integers(0, 3), st.booleans()), min_size=1, max_size=5),
    keep=st.integers(1, 12),
)
def test_a_cutoff_never_orphans_a_result_when_ids_are_reused(
    turns: list[tuple[int, bool]], keep: int
) -> None:
    messages: list[BaseMessage] = []
    for index, (calls, answered) in enumerate(turns):
        messages += _turn(index, calls, "r")
        if answered:
            messages.append(AIMessage(f"a{index}"))
    cutoff = choose_cutoff(messages, keep)
    if cutoff is not None:
        assert not isinstance(messages[cutoff], ToolMessage), "the kept part starts with a result"
        assert not unsafe_cutoffs(messages)[cutoff]


def test_d2_reused_ids_example() -> None:
    """The fuzzed flow's shrunk example: every AI message calls `call_0`."""
    messages = [*_turn(1, 1, "r1"), AIMessage("a1"), *_turn(2, 1, "r2")]
    cutoff = choose_cutoff(messages, 5)
    assert cutoff is not None and not isinstance(messages[cutoff], ToolMessage)
