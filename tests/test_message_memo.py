"""S12: the whole-message memo behind the middleware's count (`immutable_messages=True`).

Oracle everywhere: the memoised count equals the exact per-content count of the same request
(`count_request_tokens`: without the memo, on a fresh counter), and a message is counted again
exactly when something it is counted from changed (the memo's misses).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
    messages_to_dict,
)

from ctxpress.tokens import TokenCounter, count_request_tokens
from ctxpress.tokens import messages as messages_module
from ctxpress.tokens.counter import REQUEST_OVERHEAD_TOKENS
from ctxpress.tokens.estimate import profile_weights
from ctxpress.tokens.estimate_cache import CACHE_MAX_CHARS, CACHE_MAX_ENTRIES, EstimateCache
from ctxpress.tokens.message_memo import REQUEST_RECORDS_MAX_ENTRIES, MessageMemo, message_fields
from ctxpress.tokens.messages import each_message_tokens, message_tokens
from ctxpress.tools.traces import iter_conversations


@pytest.fixture
def counter() -> TokenCounter:
    return TokenCounter()


def _exact(messages: Sequence[BaseMessage]) -> int:
    """The count without any memo, on a fresh counter: the oracle."""
    return count_request_tokens(messages)


def _memo(counter: TokenCounter, messages: Sequence[BaseMessage]) -> int:
    return counter.count_request(messages, immutable_messages=True)


def _estimate_cache() -> EstimateCache:
    return EstimateCache(profile_weights("default"), CACHE_MAX_ENTRIES, CACHE_MAX_CHARS)


def _each_message_tokens(
    messages: Sequence[BaseMessage], fields: Sequence[tuple[Any, ...]], cache: EstimateCache
) -> list[int]:
    """The memo's batch counter, by the Python count of each message (its fields unused)."""
    return each_message_tokens(messages, cache)


def _reload(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """Equal messages in new objects, as after a checkpoint load."""
    return messages_from_dict(messages_to_dict(list(messages)))


class _CountedMessages:
    """Messages a counter's memo counted (its misses: one per message actually counted)."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self.seen = self._misses()

    def _misses(self) -> int:
        return self.counter.cache_info()["message_misses"]

    def take(self) -> int:
        misses = self._misses()
        calls, self.seen = misses - self.seen, misses
        return calls


def _thread() -> list[BaseMessage]:
    call = {
        "name": "query_kb",
        "args": {"query": "退货政策", "top_k": 3},
        "id": "call_1",
        "type": "tool_call",
    }
    return [
        HumanMessage("请查一下退货政策，并总结要点。", id="h1"),
        AIMessage(
            "",
            tool_calls=[call],
            additional_kwargs={
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "query_kb", "arguments": '{"query": "退货政策", "top_k": 3}'},
                    }
                ]
            },
            id="a1",
        ),
        ToolMessage(
            '{"results": [{"title": "退货政策", "content": "七天无理由退货。"}]}',
            tool_call_id="call_1",
            id="t1",
        ),
        AIMessage("七天内可以无理由退货。", id="a2"),
        HumanMessage([{"type": "text", "text": "还有别的吗？"}, {"type": "text", "text": "谢谢"}], id="h2"),
    ]


def test_s12_memo_count_equals_the_exact_count(counter: TokenCounter) -> None:
    messages = _thread()
    assert _memo(counter, messages) == _exact(messages)
    assert _memo(counter, messages) == _exact(messages)  # from the memo this time


def test_s12_memo_same_objects_are_not_counted_again(counter: TokenCounter) -> None:
    messages = _thread()
    counted = _CountedMessages(counter)
    first = _memo(counter, messages)
    assert counted.take() == len(messages)
    for _ in range(20):
        assert _memo(counter, messages) == first
    assert counted.take() == 0


def test_s12_memo_reloaded_copies_are_found_by_id_and_adopted(counter: TokenCounter) -> None:
    messages = _thread()
    first = _memo(counter, messages)
    counted = _CountedMessages(counter)
    copies = _reload(messages)
    assert all(copy is not original for copy, original in zip(copies, messages, strict=True))
    assert _memo(counter, copies) == first
    assert counted.take() == 0  # equal fields: found by id, nothing recounted


def test_s12_memo_adopts_reloaded_copies() -> None:
    memo, cache = MessageMemo(), _estimate_cache()
    messages = _thread()
    first = memo.total(messages, _each_message_tokens, cache)
    copies = _reload(messages)
    assert memo.total(copies, _each_message_tokens, cache) == first
    # Adopted: the thread's record now holds the new objects' fields, so that the next call
    # compares identical objects.
    latest_fields, latest_total = memo.requests[(copies[0].id, copies[1].id)][0]
    assert latest_total == first
    assert all(fields[1] is copy.content for fields, copy in zip(latest_fields, copies, strict=True))


class _SpiedMemo(MessageMemo):
    """A memo that records where each count started looking messages up one by one."""

    def __init__(self, **bounds: int) -> None:
        super().__init__(**bounds)
        self.starts: list[int] = []

    def _sum(self, messages: Any, all_fields: Any, start: int, *rest: Any) -> int:
        self.starts.append(start)
        return super()._sum(messages, all_fields, start, *rest)


def test_s12_memo_a_reloaded_thread_that_grew_looks_up_only_its_new_messages() -> None:
    """Between two runs the state comes back from the checkpoint in new objects, with the new turn
    appended: the earlier messages are matched as one list, the new ones one by one (issue 18
    item 13: the reload path)."""
    memo, cache = _SpiedMemo(), _estimate_cache()
    thread = _thread()
    assert memo.total(thread[:3], _each_message_tokens, cache) == _exact(thread[:3]) - REQUEST_OVERHEAD_TOKENS
    grown = _reload(thread)
    assert memo.total(grown, _each_message_tokens, cache) == _exact(thread) - REQUEST_OVERHEAD_TOKENS
    assert memo.starts == [0, 3]
    assert memo.total(grown, _each_message_tokens, cache) == _exact(thread) - REQUEST_OVERHEAD_TOKENS
    assert memo.starts == [0, 3]  # the same list again: nothing looked up one by one


def test_s12_memo_the_effective_messages_and_their_compacted_view_both_keep_their_record() -> None:
    memo, cache = _SpiedMemo(), _estimate_cache()
    messages = _thread()
    view = [*messages[:2], messages[2].model_copy(update={"content": "[已存入工作目录]"}), *messages[3:]]
    for _ in range(3):
        assert memo.total(messages, _each_message_tokens, cache) == _exact(messages) - REQUEST_OVERHEAD_TOKENS
        assert memo.total(view, _each_message_tokens, cache) == _exact(view) - REQUEST_OVERHEAD_TOKENS
    assert memo.starts == [0, 0]  # each list looked up once, then found whole
    changed = [*messages[:4], HumanMessage("换了最后一条", id="h2")]  # a prefix of neither
    assert memo.total(changed, _each_message_tokens, cache) == _exact(changed) - REQUEST_OVERHEAD_TOKENS


def test_s12_memo_threads_whose_summaries_share_an_id_keep_their_own_records() -> None:
    """Every thread's first summary is `ctxpress-summary-1`: three such threads (more than the two
    slots of one key), counted in turn, are each found whole after their first count."""
    memo, cache = _SpiedMemo(), _estimate_cache()
    threads = [
        [HumanMessage(f"[ctxpress:summary] 摘要 {n}", id="ctxpress-summary-1"), *_reload(_thread())]
        for n in range(3)
    ]
    for index, thread in enumerate(threads):  # distinct raw messages after the summary
        thread[1] = HumanMessage(f"第 {index} 个对话的问题", id=f"q{index}")
    for _ in range(3):
        for thread in threads:
            assert memo.total(thread, _each_message_tokens, cache) == _exact(thread) - REQUEST_OVERHEAD_TOKENS
    assert memo.starts == [0, 0, 0]


def test_s12_memo_request_records_stay_bounded() -> None:
    memo, cache = MessageMemo(max_entries=1_000_000, max_tokens=2_000), _estimate_cache()
    for thread in range(3 * REQUEST_RECORDS_MAX_ENTRIES):
        messages = [HumanMessage(f"第 {thread} 个对话" + "内容" * (thread % 40), id=f"t{thread}")]
        assert memo.total(messages, _each_message_tokens, cache) == message_tokens(messages[0], cache)
        assert len(memo.requests) <= REQUEST_RECORDS_MAX_ENTRIES
        assert memo.requests_tokens <= 2_000 // 2
        assert memo.requests_tokens == sum(t for entry in memo.requests.values() for _, t in entry)
    huge = [HumanMessage("很长的对话。" * 2_000, id="huge")]
    assert memo.total(huge, _each_message_tokens, cache) == message_tokens(huge[0], cache)
    assert "huge" not in memo.requests


@pytest.mark.parametrize(
    ("index", "change"),
    [
        (0, {"content": "换一个完全不同的问题：运费怎么算？"}),
        (0, {"name": "客户"}),
        (1, {"tool_calls": [{"name": "query_kb", "args": {"query": "运费", "top_k": 30}, "id": "call_1"}]}),
        (1, {"additional_kwargs": {}}),
        (2, {"tool_call_id": "call_1_but_much_longer_than_before"}),
        (4, {"content": [{"type": "text", "text": "只有一个块了"}]}),
    ],
)
def test_s12_memo_reassigned_field_is_counted_again(
    counter: TokenCounter, index: int, change: dict[str, object]
) -> None:
    messages = _thread()
    _memo(counter, messages)
    for field, value in change.items():
        setattr(messages[index], field, value)  # the same object, a field replaced
    assert _memo(counter, messages) == _exact(messages)


def test_s12_memo_copy_with_new_content_under_the_same_id(counter: TokenCounter) -> None:
    """L1's compacted view keeps each message's id: original and view alternate, both remembered."""
    messages = _thread()
    view = [*messages[:2], messages[2].model_copy(update={"content": "[已存入工作目录]"}), *messages[3:]]
    exact_original, exact_view = _exact(messages), _exact(view)
    assert exact_view < exact_original
    assert _memo(counter, messages) == exact_original
    assert _memo(counter, view) == exact_view
    counted = _CountedMessages(counter)
    for _ in range(5):
        assert _memo(counter, messages) == exact_original
        assert _memo(counter, view) == exact_view
    assert counted.take() == 0  # two slots per id: neither version is recounted


def test_s12_memo_reloaded_replacement_of_the_same_length_under_the_same_id_is_counted_again(
    counter: TokenCounter,
) -> None:
    """The invariant a cheaper reload key would break: `add_messages` may replace a message under its
    id with text of the same class, length, start and end; after a checkpoint reload it is counted
    from its new text, not remembered by id, length or a sample (issue 18 item 13)."""
    head, tail = "Result of the search:\n", "\n-- end of results"
    english, chinese = "the policy allows returns " * 12, "退货政策允许七天内无理由退货，运费由买家承担。" * 7
    middle_length = max(len(english), len(chinese))
    before = [
        *_thread()[:2],
        ToolMessage(head + english.ljust(middle_length) + tail, tool_call_id="call_1", id="t1"),
    ]
    after = [
        *before[:2],
        ToolMessage(head + chinese.ljust(middle_length) + tail, tool_call_id="call_1", id="t1"),
    ]
    assert len(before[2].content) == len(after[2].content) and before[2].id == after[2].id
    assert _exact(after) != _exact(before)
    assert _memo(counter, _reload(before)) == _exact(before)
    counted = _CountedMessages(counter)
    assert _memo(counter, _reload(after)) == _exact(after)
    assert counted.take() == 1  # the replaced message only
    assert _memo(counter, _reload(before)) == _exact(before)  # and back: the slot before it


def test_s12_memo_other_class_under_the_same_id_is_another_message(counter: TokenCounter) -> None:
    human = [HumanMessage("同样的文字", id="x")]
    ai = [AIMessage("同样的文字", id="x", tool_calls=[{"name": "f", "args": {"a": "b" * 200}, "id": "c"}])]
    assert _memo(counter, human) == _exact(human)
    assert _memo(counter, ai) == _exact(ai)
    assert _memo(counter, human) == _exact(human)


def test_s12_memo_messages_without_id_are_found_by_identity(counter: TokenCounter) -> None:
    messages = [HumanMessage("没有 id 的消息"), AIMessage("回答")]
    exact = _exact(messages)
    assert _memo(counter, messages) == exact
    counted = _CountedMessages(counter)
    assert _memo(counter, messages) == exact
    assert counted.take() == 0
    messages[0].content = "内容换了"
    assert _memo(counter, messages) == _exact(messages)


def test_s12_memo_memory_stays_bounded() -> None:
    memo = MessageMemo(max_entries=100, max_tokens=5_000)
    cache = _estimate_cache()
    for step in range(5_000):
        message = HumanMessage(f"第 {step} 条消息：" + "内容" * (step % 50), id=f"m{step}")
        tokens_of = memo.count(message.id, message, message_fields(message), message_tokens, cache)
        assert tokens_of == message_tokens(message, cache)
        assert len(memo) <= 100
        assert memo.young_tokens <= 5_000 // 2
    # What is used on every call survives the rotations.
    kept = HumanMessage("每次都用", id="kept")
    for step in range(1_000):
        memo.count("kept", kept, message_fields(kept), message_tokens, cache)
        churn = HumanMessage(f"新的 {step}", id=f"n{step}")
        memo.count(churn.id, churn, message_fields(churn), message_tokens, cache)
    misses = memo.misses
    memo.count("kept", kept, message_fields(kept), message_tokens, cache)
    assert memo.misses == misses


def test_s12_memo_a_message_too_big_to_keep_is_still_counted_right() -> None:
    memo = MessageMemo(max_entries=100, max_tokens=100)
    cache = _estimate_cache()
    big = ToolMessage("很长的工具输出。" * 500, tool_call_id="c", id="big")
    counted = memo.count("big", big, message_fields(big), message_tokens, cache)
    assert counted == message_tokens(big, cache)
    assert len(memo) == 0


# --- Property: any sequence of runs, reloads and edits gives the exact count ------------------------

_TEXTS = ["你好", "查询结果如下：\n" + "数据" * 40, "ok", "", "The answer is 42.", '退货\t政策  {"a": 1}']

_operation = st.one_of(
    st.tuples(st.just("append"), st.integers(0, 10_000)),
    st.tuples(st.just("reload"), st.just(0)),
    st.tuples(st.just("reassign"), st.integers(0, 10_000)),
    st.tuples(st.just("replace_by_id"), st.integers(0, 10_000)),
    st.tuples(st.just("count"), st.just(0)),
)


def _new_message(seed: int) -> BaseMessage:
    text = _TEXTS[seed % len(_TEXTS)] + str(seed % 7)
    kind = seed % 3
    if kind == 0:
        return HumanMessage(text, id=f"m{seed % 11}")
    if kind == 1:
        args = {"query": text, "n": seed % 5} if seed % 2 else {"steps": [{"text": text}]}
        return AIMessage(
            text, tool_calls=[{"name": "q", "args": args, "id": f"c{seed % 5}"}], id=f"m{seed % 11}"
        )
    return ToolMessage(text, tool_call_id=f"c{seed % 5}", id=f"m{seed % 11}")


@settings(max_examples=150, deadline=None)
@given(st.lists(_operation, min_size=1, max_size=30))
def test_s12_memo_equals_exact_count_under_any_history_of_changes(operations: list[tuple[str, int]]) -> None:
    counter = TokenCounter()
    messages: list[BaseMessage] = [HumanMessage("开始", id="start")]
    for name, seed in operations:
        if name == "append":
            messages.append(_new_message(seed))
        elif name == "reload":
            messages = _reload(messages)
        elif name == "reassign" and messages:
            target = messages[seed % len(messages)]
            target.content = _TEXTS[seed % len(_TEXTS)] + "改"
        elif name == "replace_by_id" and messages:
            index = seed % len(messages)
            messages[index] = messages[index].model_copy(update={"content": f"替换 {seed}"})
        memoised = _memo(counter, messages)
        oracle = counter.count_request(messages)  # the per-content path on the same (warm) counter
        assert memoised == oracle


# --- Real traces ------------------------------------------------------------------------------------


def test_s12_memo_equals_exact_count_on_every_real_trace(counter: TokenCounter, traces_dir: Path) -> None:
    checked = 0
    for conversation in itertools.islice(iter_conversations(traces_dir), 400):
        messages = list(conversation.messages)
        assert _memo(counter, messages) == counter.count_request(messages), conversation.name
        reloaded = _reload(messages)
        assert _memo(counter, reloaded) == counter.count_request(reloaded), conversation.name
        checked += 1
    assert checked > 50


class _RecordedCounts:
    """`each_message_tokens`, recording which messages each call was asked for."""

    def __init__(self) -> None:
        self.calls: list[list[str | None]] = []

    def __call__(
        self, messages: Sequence[BaseMessage], fields: Sequence[tuple[Any, ...]], cache: EstimateCache
    ) -> list[int]:
        assert list(fields) == [message_fields(message) for message in messages]
        self.calls.append([message.id for message in messages])
        return each_message_tokens(messages, cache)


def test_s12_memo_counts_a_first_sight_in_one_call_and_then_only_what_changed() -> None:
    """Issue 18 item 13 (the cold path): the messages a memo has not seen are counted by one call
    of the batch counter (the compiled walk's fixed cost paid once per thread, not per message);
    a reload asks for nothing, and a message replaced under its id is the only one asked for."""
    memo, cache, recorded = MessageMemo(), _estimate_cache(), _RecordedCounts()
    thread = _thread()
    assert memo.total(thread, recorded, cache) == _exact(thread) - REQUEST_OVERHEAD_TOKENS
    assert recorded.calls == [[message.id for message in thread]]
    assert memo.total(_reload(thread), recorded, cache) == _exact(thread) - REQUEST_OVERHEAD_TOKENS
    assert len(recorded.calls) == 1
    changed = [*_reload(thread)[:-1], thread[-1].model_copy(update={"content": "新的内容"})]
    assert memo.total(changed, recorded, cache) == _exact(changed) - REQUEST_OVERHEAD_TOKENS
    assert recorded.calls[1:] == [[thread[-1].id]]
    # Its earlier version moved to the second slot: going back costs no count either.
    assert memo.total(_reload(thread), recorded, cache) == _exact(thread) - REQUEST_OVERHEAD_TOKENS
    assert len(recorded.calls) == 2


def test_s12_memo_first_sight_with_an_id_twice_keeps_both_versions() -> None:
    """Two different messages under one id in one list (the batch store's general path): both are
    counted right, now and when counted again."""
    memo, cache = MessageMemo(), _estimate_cache()
    twice = [HumanMessage("第一个版本", id="same"), HumanMessage("第二个版本，更长一些", id="same")]
    assert memo.total(twice, _each_message_tokens, cache) == _exact(twice) - REQUEST_OVERHEAD_TOKENS
    for alone in twice:
        assert memo.total([alone], _each_message_tokens, cache) == _exact([alone]) - REQUEST_OVERHEAD_TOKENS
    assert memo.misses == 2


def test_s12_a_new_counter_knows_langchain_message_classes_as_their_own_count_would() -> None:
    """The class table a counter starts with (so that a first sight walks LangChain's messages in C
    from the first one) says what the lookup of each class says."""
    seeded = TokenCounter()._caches("default")[0].message_kinds
    assert set(seeded) == {HumanMessage, SystemMessage, AIMessage, ToolMessage}
    for message_class, kind in seeded.items():
        assert messages_module._message_kind(_estimate_cache(), message_class) == kind
