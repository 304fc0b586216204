"""S12: the fast paths of the character-class scan give the very features of the pure one.

The compiled scan (the C extension `ctxpress.tokens._scan`) gives the pure scan's features, its
estimates and, walking a thread's messages, `each_message_tokens`.

Issue 18 item 13 (the cold path): a first count of a thread scans its texts in one numpy batch
(`features_batch`), long texts take numpy's vectorised class counts (`class_counts`), and the
middleware's first count estimates a thread's texts in one batch (`messages.prefetch_texts`). Each
is checked against the pure per-text scan -- itself checked against a regex reference in
test_tokens.py -- and the counts against a count without any of them (numpy absent).
"""

from __future__ import annotations

import gc
import json
import sys
from collections.abc import Sequence
from functools import partial
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from ctxpress.app.testing import token_samples
from ctxpress.tokens import TokenCounter, count_request_tokens
from ctxpress.tokens import class_counts as class_counts_module
from ctxpress.tokens import features as features_module
from ctxpress.tokens import features_batch as batch_module
from ctxpress.tokens import messages as messages_module
from ctxpress.tokens.cl100k_ideographs import CL100K_ONE_TOKEN_IDEOGRAPHS
from ctxpress.tokens.class_counts import NUMPY_CLASS_COUNTS, pure_class_counts
from ctxpress.tokens.estimate import PROFILE_NAMES, compiled_settings, estimates, profile_weights, weigh
from ctxpress.tokens.estimate_cache import EstimateCache
from ctxpress.tokens.features import NUMPY_MIN_BYTES, CompiledScan, features_of, text_features
from ctxpress.tokens.features_batch import BATCH_MIN_TEXTS, NUMPY_TEXTS_FEATURES, texts_features
from ctxpress.tokens.ideographs import ONE_TOKEN_IDEOGRAPH_BITMAP, one_token_bitmap
from ctxpress.tokens.message_memo import message_fields
from ctxpress.tokens.messages import count_new_messages, each_message_tokens, message_tokens, provider_json
from tests.conftest import IN_CI, require_shared_data, use_scan

needs_numpy = pytest.mark.skipif(NUMPY_TEXTS_FEATURES is None, reason="numpy is not installed")

# Characters at every class boundary the scan draws: ASCII classes, two-byte letters, CJK symbols
# (U+3000-303F) next to kana, full-width forms (U+FF00-FF7F) next to half-width ones, ideographs,
# other BMP symbols, astral characters, a lone surrogate, and the pieces of a JSON `\uXXXX` escape.
_BOUNDARY_CHARS = list(
    'aZ09 \t\n\r!~\x00\x7f\\u{}":,éßΩЖ\u07ff\u0800\u2014\u2192\u3000\u3002\u303f\u3040\u30a2'
    "\u3fff\u4000\u4e2d\u9fff\ua000\uac00\ud7a3\ue000\ufeff\uff00\uff0c\uff41\uff7f\uff80\uffe5"
    "\U0001f600\U00010000\U0010ffff\ud83d"
)
_TEXT = st.text(alphabet=st.one_of(st.sampled_from(_BOUNDARY_CHARS), st.characters()), max_size=80)


def _pure(text: str) -> tuple[int, ...]:
    return features_of(text, text.encode("utf-8", "surrogatepass"), pure_class_counts)


@needs_numpy
@settings(max_examples=300, deadline=None)
@given(st.lists(_TEXT, max_size=3 * BATCH_MIN_TEXTS))
def test_s12_batch_scan_gives_the_pure_features_of_every_text(texts: list[str]) -> None:
    assert NUMPY_TEXTS_FEATURES is not None
    datas = [text.encode("utf-8", "surrogatepass") for text in texts]
    assert NUMPY_TEXTS_FEATURES(texts, datas) == [_pure(text) for text in texts]


@needs_numpy
@settings(max_examples=200, deadline=None)
@given(_TEXT)
def test_s12_vectorised_class_counts_give_the_pure_features(text: str) -> None:
    assert NUMPY_CLASS_COUNTS is not None
    data = text.encode("utf-8", "surrogatepass")
    assert features_of(text, data, NUMPY_CLASS_COUNTS) == _pure(text)


@needs_numpy
@pytest.mark.shared_data
def test_s12_fast_paths_give_the_pure_features_on_a_real_thread() -> None:
    thread = token_samples.real_thread(require_shared_data())
    texts = [message.content for message in thread if isinstance(message.content, str)]
    long_texts = [text for text in texts if len(text.encode("utf-8", "surrogatepass")) >= NUMPY_MIN_BYTES]
    assert len(texts) > 100 and long_texts  # the batch and the size gate are both exercised
    pure = [_pure(text) for text in texts]
    assert texts_features(texts) == pure
    assert [text_features(text) for text in texts] == pure


def test_s12_without_numpy_every_fast_path_falls_back_to_the_pure_scan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "numpy", None)  # `import numpy` now raises ImportError
    assert class_counts_module._numpy_class_counts() is None
    assert batch_module._numpy_texts_features() is None
    monkeypatch.setattr(features_module, "NUMPY_CLASS_COUNTS", None)
    monkeypatch.setattr(batch_module, "NUMPY_TEXTS_FEATURES", None)
    texts = ["中文，测试。" * 500, "plain words 123", "x" * NUMPY_MIN_BYTES, *_BOUNDARY_CHARS]
    assert texts_features(texts) == [_pure(text) for text in texts]
    assert text_features(texts[2]) == _pure(texts[2])


def _thread(size: int) -> list[BaseMessage]:
    """A thread whose every text is new: contents, names, tool calls and their ids."""
    messages: list[BaseMessage] = []
    for turn in range(size):
        call_id = f"call_{turn}"
        messages += [
            HumanMessage(f"question {turn}: 中文的问题，第{turn}个。", id=f"h{turn}", name=f"user{turn % 3}"),
            AIMessage(
                "",
                id=f"a{turn}",
                tool_calls=[
                    {"name": "read_file", "args": {"path": f"/src/m{turn}.py", "limit": turn}, "id": call_id}
                ],
            ),
            ToolMessage(
                f"def f{turn}():\n    return {turn} * 2  # ｈｅｌｌｏ\n" * (turn + 1),
                tool_call_id=call_id,
                id=f"t{turn}",
            ),
        ]
    return messages


@pytest.mark.parametrize(("scan", "numpy_installed"), [("compiled", True), ("pure", True), ("pure", False)])
def test_s12_first_count_of_a_thread_equals_the_per_text_count(
    scan: str, numpy_installed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The middleware's first count (memo; the compiled walk, or the batch prefetch) equals the count
    without either. The prefetch leaves the cache with the texts and calls counting them one by
    one would; the compiled walk leaves it empty (the memo keeps the counts, and a new counter knows
    LangChain's message classes, so no message goes to the Python fallback)."""
    use_scan(monkeypatch, scan)
    if not numpy_installed:
        monkeypatch.setattr(features_module, "NUMPY_CLASS_COUNTS", None)
        monkeypatch.setattr(batch_module, "NUMPY_TEXTS_FEATURES", None)
    messages = _thread(3 * BATCH_MIN_TEXTS)
    first, per_text = TokenCounter(), TokenCounter()
    assert first.count_request(messages, immutable_messages=True) == count_request_tokens(messages)
    per_text.count_request(messages)
    batched_cache, per_text_cache = first._caches("default")[0], per_text._caches("default")[0]
    if scan == "compiled":
        assert not batched_cache.young and not batched_cache.old
    else:
        assert dict(batched_cache.young) == dict(per_text_cache.young)
    # Counted again (same objects), then a reload with one message replaced under its id.
    assert first.count_request(messages, immutable_messages=True) == count_request_tokens(messages)
    changed = [
        *messages[:-1],
        ToolMessage("now a different result", tool_call_id="call_x", id=messages[-1].id),
    ]
    assert first.count_request(changed, immutable_messages=True) == count_request_tokens(changed)


# --- The compiled scan (ctxpress.tokens._scan) against the pure one -------------------------------

needs_compiled = pytest.mark.skipif(
    features_module.COMPILED_SCAN is None and not IN_CI,
    reason="the C scan ctxpress.tokens._scan was not built (setup.py needs a C compiler)",
)


def _compiled() -> CompiledScan:
    assert features_module.COMPILED_SCAN is not None, "the C scan was not built"
    return features_module.COMPILED_SCAN


@needs_compiled
@settings(max_examples=400, deadline=None)
@given(_TEXT)
def test_s12_compiled_scan_gives_the_pure_features(text: str) -> None:
    assert _compiled().features(text) == _pure(text)


@needs_compiled
@settings(max_examples=150, deadline=None)
@given(st.lists(_TEXT, max_size=20), st.sampled_from(PROFILE_NAMES))
def test_s12_compiled_estimates_equal_the_pure_weighing(texts: list[str], profile: str) -> None:
    """Same features, same left-to-right float sums, same rounding: the same estimate, cl100k's
    split ideographs included."""
    weights = profile_weights(profile)
    expected = [weigh(text, _pure(text), weights) if text else 0 for text in texts]
    assert _compiled().estimates(texts, *compiled_settings(weights)) == expected


@needs_compiled
@pytest.mark.shared_data
def test_s12_compiled_scan_gives_the_pure_estimates_on_a_real_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    thread = token_samples.real_thread(require_shared_data())
    texts = [message.content for message in thread if isinstance(message.content, str)]
    compiled = [_compiled().features(text) for text in texts]
    assert compiled == [_pure(text) for text in texts]
    for profile in PROFILE_NAMES:
        weights = profile_weights(profile)
        with_compiled = estimates(texts, weights)
        monkeypatch.setattr(features_module, "COMPILED_SCAN", None)
        assert with_compiled == estimates(texts, weights), profile
        monkeypatch.undo()


def test_s12_one_token_bitmap_marks_exactly_cl100k_one_token_ideographs() -> None:
    marked = {
        chr(0x4000 + offset)
        for offset in range(8 * len(ONE_TOKEN_IDEOGRAPH_BITMAP))
        if ONE_TOKEN_IDEOGRAPH_BITMAP[offset >> 3] >> (offset & 7) & 1
    }
    assert marked == set(CL100K_ONE_TOKEN_IDEOGRAPHS)
    with pytest.raises(ValueError, match="outside"):
        one_token_bitmap("a")


# Messages of every shape the compiled walk reads itself or hands back to Python.
_WORDS = st.text(alphabet=st.sampled_from(_BOUNDARY_CHARS), max_size=12)
_FLAT_ARGS = st.dictionaries(
    _WORDS, st.one_of(_WORDS, st.integers(), st.floats(allow_nan=False), st.booleans(), st.none()), max_size=3
)
_ARGS = st.one_of(_FLAT_ARGS, st.dictionaries(_WORDS, st.lists(_FLAT_ARGS, max_size=2), max_size=2))


@st.composite
def _message(draw: st.DrawFn) -> BaseMessage:
    content: Any = draw(
        st.one_of(
            _TEXT,
            st.lists(
                st.one_of(
                    _TEXT,
                    st.fixed_dictionaries({"type": st.just("text"), "text": _TEXT}),
                    st.just({"type": "image_url", "image_url": {"url": "https://x/y.png"}}),
                ),
                max_size=3,
            ),
        )
    )
    name = draw(st.one_of(st.none(), st.just(""), _WORDS))
    kind = draw(st.sampled_from(["human", "system", "tool", "ai"]))
    if kind == "human":
        return HumanMessage(content, name=name)
    if kind == "system":
        return SystemMessage(content, name=name)
    if kind == "tool":
        return ToolMessage(content, name=name, tool_call_id=draw(_WORDS))
    calls = [
        {
            "name": draw(_WORDS),
            "args": draw(_ARGS),
            "id": draw(st.one_of(st.none(), _WORDS)),
            "type": "tool_call",
        }
        for _ in range(draw(st.integers(0, 3)))
    ]
    mirror = [
        {"id": call["id"], "type": "function", "function": {"name": call["name"], "arguments": "{}"}}
        for call in calls
    ]
    extra = draw(
        st.sampled_from(
            [
                {},
                {"tool_calls": mirror},
                {"tool_calls": mirror[:1]},
                {"tool_calls": [{"id": "other", "function": {"name": "f", "arguments": '{"a": 1}'}}]},
                {"function_call": {"name": "legacy", "arguments": '{"q": "中文"}'}},
                {"refusal": None},
                {"tool_calls": None},
            ]
        )
    )
    invalid = draw(
        st.sampled_from(
            [
                [],
                [
                    {
                        "name": "bad",
                        "args": "{not json",
                        "id": "bad_1",
                        "error": None,
                        "type": "invalid_tool_call",
                    }
                ],
            ]
        )
    )
    return AIMessage(
        content, name=name, tool_calls=calls, invalid_tool_calls=invalid, additional_kwargs=extra
    )


def _fields(messages: Sequence[BaseMessage]) -> list[tuple[Any, ...]]:
    return [message_fields(message) for message in messages]


def _first_sight(
    messages: Sequence[BaseMessage],
    cache: EstimateCache,
    fields: Sequence[tuple[Any, ...]] | None = None,
    provider: Any = provider_json,
    fallback: Any = None,
) -> list[int]:
    """The compiled walk as `messages.count_new_messages` calls it, with the fields, JSON writer and
    fallback a test chooses (by default the messages' own, `provider_json`, `message_tokens`)."""
    return _compiled().first_sight(
        messages,
        _fields(messages) if fields is None else fields,
        *compiled_settings(cache.weights),
        cache.message_kinds,
        messages_module._OVERHEADS,
        provider,
        partial(message_tokens, cache=cache) if fallback is None else fallback,
    )


def _fresh_cache(profile: str = "default") -> EstimateCache:
    return TokenCounter()._caches(profile)[0]


@needs_compiled
@settings(max_examples=200, deadline=None)
@given(st.lists(_message(), max_size=12), st.sampled_from(PROFILE_NAMES))
def test_s12_compiled_first_sight_counts_each_message_as_python_does(
    messages: list[BaseMessage], profile: str
) -> None:
    """Issue 18 item 13: the C walk of a first sight gives `each_message_tokens` message by message,
    whatever the shapes (those it does not read itself go to its Python fallback)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(features_module, "COMPILED_SCAN", None)
        expected = each_message_tokens(messages, _fresh_cache(profile))
    assert count_new_messages(messages, _fields(messages), _fresh_cache(profile)) == expected


@needs_compiled
@pytest.mark.shared_data
def test_s12_compiled_first_sight_of_a_real_thread_counts_as_python_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    thread = token_samples.real_thread(require_shared_data())
    compiled = count_new_messages(thread, _fields(thread), _fresh_cache("cl100k"))
    monkeypatch.setattr(features_module, "COMPILED_SCAN", None)
    assert compiled == each_message_tokens(thread, _fresh_cache("cl100k"))


class _OddHuman(HumanMessage):
    """A message class the walk has not met: it asks the fallback."""


@needs_compiled
def test_s12_compiled_first_sight_survives_a_thread_changed_while_it_is_counted() -> None:
    """The fallback may run any Python code; here it empties the caller's list, which held the only
    other references to the messages still to count. The walk holds its own, so it neither reads
    freed memory nor miscounts (a walk over the caller's list would read freed memory here)."""

    def thread() -> list[BaseMessage]:
        return [
            _OddHuman("the odd one", id="odd"),
            *(HumanMessage(f"消息 {index} " * 50, id=f"h{index}") for index in range(20)),
            AIMessage("", id="a", tool_calls=[{"name": "search", "args": {"q": "x" * 100}, "id": "c1"}]),
        ]

    expected = each_message_tokens(thread(), _fresh_cache())
    messages = thread()
    cache = _fresh_cache()

    def fallback(message: BaseMessage) -> int:
        tokens = message_tokens(message, cache)
        messages.clear()
        gc.collect()
        return tokens

    assert _first_sight(messages, cache, fallback=fallback) == expected


@needs_compiled
def test_s12_compiled_scan_refuses_bad_settings_with_a_clear_error() -> None:
    weights = profile_weights("default")
    with pytest.raises(TypeError, match="tuple of 18 floats"):
        _compiled().estimates(["x"], weights[:-1], 12, 4, ONE_TOKEN_IDEOGRAPH_BITMAP)
    with pytest.raises(TypeError, match="bytes"):
        _compiled().estimates(["x"], weights, 12, 4, b"short")
    with pytest.raises(TypeError, match="str texts"):
        _compiled().estimates([b"x"], weights, 12, 4, ONE_TOKEN_IDEOGRAPH_BITMAP)
    with pytest.raises(ValueError, match="positive"):
        _compiled().estimates(["x"], weights, 12, 0, ONE_TOKEN_IDEOGRAPH_BITMAP)


@needs_compiled
@pytest.mark.parametrize("piece", ["a", "ab 12\n", "中文", "x\\u00e9 ", "\t\t\r\n"])
def test_s12_compiled_scan_counts_runs_across_its_chunks(piece: str) -> None:
    """The C loop sums its ASCII counts per chunk of 4,095 characters; a run that spans a chunk
    boundary is still one run, and no count overflows its field."""
    for length in (4094, 4095, 4096, 3 * 4095 + 5):
        text = (piece * (length // len(piece) + 1))[:length]
        assert _compiled().features(text) == _pure(text), (piece, length)


_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), _TEXT),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(_WORDS, st.integers(), st.booleans(), st.none()), inner, max_size=3),
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(_JSON)
def test_s12_provider_json_is_what_json_dumps_writes(value: Any) -> None:
    """The prebuilt encoder of tool arguments writes exactly `json.dumps(..., ensure_ascii=False,
    default=str)`: NaN, non-string keys and objects it cannot encode included."""
    assert provider_json(value) == json.dumps(value, ensure_ascii=False, default=str)
    assert provider_json({"odd": object}) == json.dumps({"odd": object}, ensure_ascii=False, default=str)


def test_s12_provider_json_of_a_circular_value_says_so() -> None:
    circular: dict[str, Any] = {}
    circular["self"] = circular
    with pytest.raises(ValueError, match="Circular reference"):
        provider_json(circular)


@needs_compiled
def test_s12_compiled_first_sight_reads_fields_only_when_they_are_the_messages_own() -> None:
    """Fields of another class, or of the wrong shape, are not read: those messages go to the
    Python count, and the counts stay right; fields and messages of different lengths are refused."""
    messages: list[BaseMessage] = [
        HumanMessage("第一条消息", id="h"),
        AIMessage("", id="a", tool_calls=[{"name": "search", "args": {"q": "上下文"}, "id": "c1"}]),
        ToolMessage("结果" * 40, tool_call_id="c1", id="t"),
    ]
    cache = _fresh_cache()
    expected = each_message_tokens(messages, _fresh_cache())
    swapped = [_fields(messages)[1], _fields(messages)[0], ("not", "fields")]
    assert _first_sight(messages, cache, swapped) == expected
    with pytest.raises(ValueError, match="differ in length"):
        _first_sight(messages, cache, _fields(messages)[:2])


@needs_compiled
def test_s12_compiled_first_sight_survives_tool_calls_emptied_while_their_json_is_written() -> None:
    """The JSON of tool arguments is Python code run in the middle of the walk; here it empties the
    message's list of calls and drops the calls' last references. The walk holds the call it reads
    and reads the list's length again before the next one, so it neither crashes nor reads freed
    memory: it counts the calls that were there when it came to them."""
    calls = [{"name": f"tool{index}", "args": {"q": "上下文" * 30}, "id": f"c{index}"} for index in range(5)]
    message = AIMessage("", id="a", tool_calls=calls)
    tool_calls = message.tool_calls
    cache = _fresh_cache()

    def emptying_json(value: Any) -> str:
        tool_calls.clear()
        gc.collect()
        return provider_json(value)

    counts = _first_sight([message], cache, provider=emptying_json)
    one_call = each_message_tokens([AIMessage("", id="b", tool_calls=calls[:1])], _fresh_cache())
    assert counts == one_call
