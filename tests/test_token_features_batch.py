"""S12: the fast paths of the character-class scan give the very features of the pure one.

Issue 18 item 13 (the cold path): a first count of a thread scans its texts in one numpy batch
(`features_batch`), long texts take numpy's vectorised class counts (`class_counts`), and the
middleware's first count estimates a thread's texts in one batch (`messages.prefetch_texts`). Each
is checked against the pure per-text scan -- itself checked against a regex reference in
test_tokens.py -- and the counts against a count without any of them (numpy absent).
"""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from ctxpress.app.testing import token_samples
from ctxpress.tokens import TokenCounter, count_request_tokens
from ctxpress.tokens import class_counts as class_counts_module
from ctxpress.tokens import features as features_module
from ctxpress.tokens import features_batch as batch_module
from ctxpress.tokens.class_counts import NUMPY_CLASS_COUNTS, pure_class_counts
from ctxpress.tokens.features import NUMPY_MIN_BYTES, features_of, text_features
from ctxpress.tokens.features_batch import BATCH_MIN_TEXTS, NUMPY_TEXTS_FEATURES, texts_features
from tests.conftest import require_shared_data

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


@pytest.mark.parametrize("numpy_installed", [True, False])
def test_s12_first_count_of_a_thread_equals_the_per_text_count(
    numpy_installed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The middleware's first count (memo, batch prefetch) equals the count without either, and the
    cache holds the same texts and calls afterwards."""
    if not numpy_installed:
        monkeypatch.setattr(features_module, "NUMPY_CLASS_COUNTS", None)
        monkeypatch.setattr(batch_module, "NUMPY_TEXTS_FEATURES", None)
    messages = _thread(3 * BATCH_MIN_TEXTS)
    first, per_text = TokenCounter(), TokenCounter()
    assert first.count_request(messages, immutable_messages=True) == count_request_tokens(messages)
    per_text.count_request(messages)
    batched_cache, per_text_cache = first._caches("default")[0], per_text._caches("default")[0]
    assert dict(batched_cache.young) == dict(per_text_cache.young)
    # Counted again (same objects), then a reload with one message replaced under its id.
    assert first.count_request(messages, immutable_messages=True) == count_request_tokens(messages)
    changed = [
        *messages[:-1],
        ToolMessage("now a different result", tool_call_id="call_x", id=messages[-1].id),
    ]
    assert first.count_request(changed, immutable_messages=True) == count_request_tokens(changed)
