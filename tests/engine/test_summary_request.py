"""S14: the summary request -- the prompt with the summarised messages rendered into `{messages}`.

Two properties: every non-text block (image, file, audio) is named once by a short placeholder
saying where it lives, never by its data, and the whole request stays within
`summary_request_budget` by the same estimate the middleware uses, whatever the messages look like.
"""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from ctxpress.compaction.content import block_placeholder
from ctxpress.compaction.text_preview import smallest_preview_budget
from ctxpress.config import CompressionConfig
from ctxpress.summary.render import MIN_TOKENS_PER_MESSAGE, render_messages
from ctxpress.summary.summarizer import build_summary_request, summary_request_budget
from ctxpress.tokens import PROFILE_NAMES, count_request_tokens, estimate_tokens
from tests.engine.compaction_support import (
    GAP_MARKER,
    ai_call,
    chinese_text,
    english_text,
    tau2_documents,
    trace_conversations,
)

pytestmark = pytest.mark.shared_data

#: Where each entry of the transcript starts: `[n] role: ` at the start of the text or of a paragraph.
ENTRY_START = re.compile(r"(?:^|\n\n)\[(\d+)\] ")
#: The line standing for messages left out of the transcript.
LEFT_OUT_LINE = re.compile(r"\[… messages? (\d+)(?:–(\d+), \d+ in all)? \(~[\d,]+ tokens\) left out …\]")
#: A marker with a negative count, the defect of cutting text by a size that included an image.
NEGATIVE_MARKER = re.compile(r"\[… -\d")
PNG_BYTES = bytes(range(256)) * 40
PNG_BASE64 = base64.b64encode(PNG_BYTES).decode()


def transcript_of(config: CompressionConfig, request: list[BaseMessage]) -> str:
    """The rendered `{messages}` part of a summary request (its first copy)."""
    before, after = config.summary_prompt.split("{messages}", 1)
    text = request[0].text
    assert text.startswith(before)
    end = text.find(after.split("{messages}", 1)[0], len(before)) if after else len(text)
    return text[len(before) : end]


def request_tokens(config: CompressionConfig, request: list[BaseMessage]) -> int:
    return count_request_tokens(request, profile=config.token_profile)


def accounted_numbers(transcript: str) -> list[int]:
    """Message numbers shown as entries or named by a left-out line, in transcript order."""
    numbers: list[tuple[int, int]] = [
        (match.start(), int(match.group(1))) for match in ENTRY_START.finditer(transcript)
    ]
    for match in LEFT_OUT_LINE.finditer(transcript):
        first = int(match.group(1))
        last = int(match.group(2) or first)
        numbers.extend((match.start(), number) for number in range(first, last + 1))
    return [number for _, number in sorted(numbers)]


def real_sentences(count: int, *, min_chars: int = 40, max_chars: int = 160) -> list[str]:
    """Short real English sentences from the tau2 banking documents."""
    sentences = [
        " ".join(piece.split())
        for doc in tau2_documents()
        for piece in re.split(r"(?<=[.?!])\s+", doc["content"])
        if min_chars <= len(" ".join(piece.split())) <= max_chars
    ]
    assert len(sentences) >= count
    return sentences[:count]


def image_message(text: str, url: str, message_id: str = "img") -> HumanMessage:
    return HumanMessage(
        content=[{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}],
        id=message_id,
    )


# ============================================================================================
# Non-text blocks: named once, where they live, never their data
# ============================================================================================


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ({"type": "image_url", "image_url": {"url": "https://cdn.example/r/receipt.png"}}, "[image: https://cdn.example/r/receipt.png]"),
        ({"type": "image_url", "image_url": "https://cdn.example/a.jpg"}, "[image: https://cdn.example/a.jpg]"),
        ({"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_BASE64}"}}, "[image: image/png, inline data not shown]"),
        ({"type": "image", "url": "https://x.example/y.webp", "mime_type": "image/webp"}, "[image: https://x.example/y.webp, image/webp]"),
        ({"type": "image", "base64": PNG_BASE64, "mime_type": "image/png"}, "[image: image/png, inline data not shown]"),
        ({"type": "image", "source_type": "base64", "data": PNG_BASE64, "mime_type": "image/jpeg"}, "[image: image/jpeg, inline data not shown]"),
        ({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_BASE64}}, "[image: image/png, inline data not shown]"),
        ({"type": "image", "source": {"type": "url", "url": "https://a.example/b.png"}}, "[image: https://a.example/b.png]"),
        ({"type": "image", "source_type": "id", "id": "file-9"}, "[image: file id file-9]"),
        ({"type": "file", "file": {"filename": "statement.pdf", "file_data": f"data:application/pdf;base64,{PNG_BASE64}"}}, "[file: statement.pdf, application/pdf]"),
        ({"type": "file", "file_id": "file-abc123", "mime_type": "application/pdf"}, "[file: file id file-abc123, application/pdf]"),
        ({"type": "file", "base64": PNG_BASE64, "mime_type": "application/pdf", "extras": {"filename": "q3.pdf"}}, "[file: q3.pdf, application/pdf]"),
        ({"type": "input_audio", "input_audio": {"data": PNG_BASE64, "format": "wav"}}, "[audio: wav, inline data not shown]"),
        ({"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PNG_BASE64}, "title": "Contract"}, "[document: Contract, application/pdf]"),
        ({"type": "server_tool_result", "output": "x"}, "[server_tool_result]"),
    ],
)  # fmt: skip
def test_s14_a_non_text_block_is_named_with_where_it_lives(block: dict[str, Any], expected: str) -> None:
    assert block_placeholder(block) == expected


@pytest.mark.parametrize(
    "block",
    [
        {"type": "reasoning", "reasoning": "private"},
        {"type": "thinking", "thinking": "private"},
        {"type": "tool_use", "id": "c1", "name": "query_kb", "input": {}},
        {"type": "text", "text": "text is rendered as text"},
    ],
)
def test_s14_reasoning_tool_call_and_text_blocks_get_no_placeholder(block: dict[str, Any]) -> None:
    assert block_placeholder(block) is None


def test_s14_a_placeholder_is_short_and_cannot_close_early() -> None:
    url = "https://cdn.example/" + "a]b[" * 200 + ".png"
    placeholder = block_placeholder({"type": "image_url", "image_url": {"url": url}})
    assert placeholder is not None and len(placeholder) < 200
    assert placeholder.count("]") == 1 and placeholder.endswith("]")


def test_s14_an_image_is_named_once_and_its_text_kept_once_when_the_input_is_squeezed() -> None:
    # The defect: the message was sized with its image (~1,000 tokens) and only its text was cut,
    # so the text came out twice around a marker with a negative count, and the image vanished.
    question = "What does this receipt say about the monthly maintenance fee?"
    url = "https://cdn.example/uploads/receipt-2024-03.png"
    messages: list[BaseMessage] = [image_message(question, url)]
    for index, sentence in enumerate(real_sentences(60)):
        messages.append(HumanMessage(sentence, id=f"h{index}") if index % 2 else AIMessage(sentence))
    config = CompressionConfig(summary_threshold=1)
    request = build_summary_request(config, messages)
    prompt = request[0].text
    assert request_tokens(config, request) <= summary_request_budget(config)
    assert prompt.count(url) == 1
    assert prompt.count(question) == 1
    assert f"[1] user: {question}\n[image: {url}]" in prompt
    assert not NEGATIVE_MARKER.search(prompt)
    assert all(int(match.group(1).replace(",", "")) > 0 for match in GAP_MARKER.finditer(prompt))


def test_s14_inline_data_never_enters_the_summary_prompt() -> None:
    messages: list[BaseMessage] = [
        HumanMessage(
            content=[
                {"type": "text", "text": "Here are my statement and a photo of the card."},
                {"type": "image", "base64": PNG_BASE64, "mime_type": "image/png"},
                {"type": "file", "file": {"filename": "statement-march.pdf", "file_data": f"data:application/pdf;base64,{PNG_BASE64}"}},
            ],
            id="upload",
        ),
        AIMessage("Thank you, I can see the statement.", id="answer"),
    ]  # fmt: skip
    config = CompressionConfig()
    prompt = build_summary_request(config, messages)[0].text
    assert PNG_BASE64[:40] not in prompt and "base64," not in prompt
    assert "[image: image/png, inline data not shown]" in prompt
    assert "[file: statement-march.pdf, application/pdf]" in prompt
    assert "Here are my statement" in prompt and "I can see the statement" in prompt


def test_s14_a_message_with_only_an_image_still_has_its_entry() -> None:
    only_image = HumanMessage(
        content=[{"type": "image_url", "image_url": {"url": "https://cdn.example/only.png"}}], id="i"
    )
    transcript = render_messages([only_image, AIMessage("A cat.")], 500)
    assert transcript == "[1] user: [image: https://cdn.example/only.png]\n\n[2] assistant: A cat."


def test_s14_many_blocks_in_one_message_are_named_up_to_a_bound() -> None:
    urls = [f"https://cdn.example/page-{page}.png" for page in range(30)]
    message = HumanMessage(
        content=[{"type": "text", "text": "scanned pages"}]
        + [{"type": "image_url", "image_url": {"url": url}} for url in urls],
        id="scan",
    )
    transcript = render_messages([message], 2_000)
    named = [url for url in urls if url in transcript]
    assert named == urls[: len(named)] and 1 <= len(named) < 30
    assert f"[… {30 - len(named)} more non-text blocks]" in transcript


# ============================================================================================
# The whole request within its budget
# ============================================================================================


def test_s14_hundred_short_messages_fit_the_summary_request_budget() -> None:
    # The defect: a 24-token floor per message, the `[n] role:` prefixes and the gap markers were
    # outside the budget, so 100 short messages overran a 2,103-token threshold.
    config = CompressionConfig(summary_threshold=2103 / 1024)
    messages: list[BaseMessage] = [
        HumanMessage(sentence, id=f"m{index}") if index % 2 == 0 else AIMessage(sentence, id=f"m{index}")
        for index, sentence in enumerate(real_sentences(100))
    ]
    request = build_summary_request(config, messages)
    tokens = request_tokens(config, request)
    budget = summary_request_budget(config)
    assert budget == int(2103 * 0.75)
    assert budget // 2 < tokens <= budget
    transcript = transcript_of(config, request)
    numbers = accounted_numbers(transcript)
    assert numbers == list(range(1, 101)), "every message shown or named as left out, once, in order"
    # The earliest and the latest are shown whole; short messages are never cut.
    assert f"[1] user: {messages[0].text}" in transcript
    assert f"[100] assistant: {messages[-1].text}" in transcript
    assert not GAP_MARKER.search(transcript)


def test_s14_a_long_prompt_still_leaves_the_minimum_room_for_messages() -> None:
    prompt = "Summarise the conversation below. " + english_text()[:20_000] + "\n{messages}\nSummary:"
    config = CompressionConfig(summary_threshold=1, summary_prompt=prompt)
    messages = [HumanMessage(sentence) for sentence in real_sentences(40)]
    request = build_summary_request(config, messages)
    bare = request_tokens(config, [HumanMessage(config.render_summary_prompt(""))])
    assert summary_request_budget(config) == bare + 512
    assert bare < request_tokens(config, request) <= summary_request_budget(config)
    assert "[1] user: " in request[0].text


def test_s14_a_prompt_with_two_placeholders_gets_the_transcript_twice_within_the_budget() -> None:
    config = CompressionConfig(
        summary_threshold=2, summary_prompt="Messages:\n{messages}\n\nAgain, the same:\n{messages}\nSummary:"
    )
    messages = [HumanMessage(sentence) for sentence in real_sentences(80)]
    request = build_summary_request(config, messages)
    assert request_tokens(config, request) <= summary_request_budget(config)
    assert request[0].text.count("[1] user: ") == 2


def test_s14_one_huge_message_is_cut_to_head_middle_and_tail_within_the_budget() -> None:
    text = chinese_text()[:200_000]
    config = CompressionConfig(summary_threshold=4)
    request = build_summary_request(config, [HumanMessage(text, id="paste"), AIMessage("收到。")])
    assert request_tokens(config, request) <= summary_request_budget(config)
    transcript = transcript_of(config, request)
    markers = GAP_MARKER.findall(transcript)
    assert len(markers) == 2, "head, middle and tail"
    assert transcript.startswith("[1] user: " + text[:20])
    assert transcript.endswith("[2] assistant: 收到。")


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_s14_a_cut_message_always_has_room_for_its_marker(profile: str) -> None:
    # The least a shown message keeps holds a head, a marker and a tail of any text up to a
    # trillion characters, so a cut message is never left without a preview.
    assert smallest_preview_budget(10**12 - 1, 10**12 - 1, profile) <= MIN_TOKENS_PER_MESSAGE


# --- the property, over real traces and injected shapes -------------------------------------


def injected(draw: st.DrawFn, serial: int) -> list[BaseMessage]:
    kind = draw(st.sampled_from(["image", "inline-image", "file", "long-en", "long-zh", "tool-call", "tiny"]))
    if kind == "image":
        url = f"https://cdn.example/{serial}/photo.jpg"
        return [
            image_message(
                draw(st.sampled_from(["", "what is this?", english_text()[:3_000]])), url, f"inj{serial}"
            )
        ]
    if kind == "inline-image":
        return [
            HumanMessage(
                content=[{"type": "image", "base64": PNG_BASE64, "mime_type": "image/png"}], id=f"inj{serial}"
            )
        ]
    if kind == "file":
        block = {"type": "file", "file_id": f"file-{serial}", "mime_type": "application/pdf"}
        return [HumanMessage(content=[{"type": "text", "text": "see the file"}, block], id=f"inj{serial}")]
    if kind in ("long-en", "long-zh"):
        source = english_text() if kind == "long-en" else chinese_text()
        size = draw(st.integers(min_value=200, max_value=120_000))
        return [HumanMessage(source[:size], id=f"inj{serial}")]
    if kind == "tool-call":
        call_id = f"inj-call-{serial}"
        return [
            ai_call(call_id, "write_file", {"file_path": "notes.md", "content": english_text()[:1_900]}),
            ToolMessage("ok", tool_call_id=call_id, name="write_file", id=f"inj-tool-{serial}"),
        ]
    count = draw(st.integers(min_value=1, max_value=300))
    return [HumanMessage(f"ok {index}", id=f"inj{serial}-{index}") for index in range(count)]  # fmt: skip


@st.composite
def summarised_ranges(draw: st.DrawFn) -> list[BaseMessage]:
    conversations = trace_conversations()
    conversation = conversations[draw(st.integers(min_value=0, max_value=len(conversations) - 1))]
    messages = list(conversation.messages)
    for serial in range(draw(st.integers(min_value=0, max_value=3))):
        slot = draw(st.integers(min_value=0, max_value=len(messages)))
        messages[slot:slot] = injected(draw, serial)
    return messages


PROMPTS = {
    "default": None,
    "short-english": "Summarise this conversation, keeping names, numbers and open tasks:\n{messages}",
    "two-placeholders": "{messages}\n---\nThe same again:\n{messages}",
}


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
@given(data=st.data())
def test_s14_summary_request_stays_within_its_budget_over_message_shapes(data: st.DataObject) -> None:
    messages = data.draw(summarised_ranges(), label="messages")
    threshold = data.draw(
        st.one_of(st.floats(min_value=0.25, max_value=4), st.floats(min_value=4, max_value=96)),
        label="threshold_k",
    )
    profile = data.draw(st.sampled_from(["default", "cl100k", "o200k", "qwen", "deepseek"]), label="profile")
    prompt = PROMPTS[data.draw(st.sampled_from(sorted(PROMPTS)), label="prompt")]
    settings_ = {"summary_prompt": prompt} if prompt else {}
    config = CompressionConfig(summary_threshold=threshold, token_profile=profile, **settings_)

    request = build_summary_request(config, messages)
    tokens = request_tokens(config, request)
    budget = summary_request_budget(config)
    assert tokens <= budget
    prompt_text = request[0].text
    assert not NEGATIVE_MARKER.search(prompt_text)
    assert all(int(match.group(1).replace(",", "")) > 0 for match in GAP_MARKER.finditer(prompt_text))
    assert PNG_BASE64[:40] not in prompt_text
    transcript = transcript_of(config, request)
    assert transcript, "the minimum room always holds at least the left-out line"
    numbers = accounted_numbers(transcript)
    assert numbers == list(range(1, len(messages) + 1))
    shown = {int(match.group(1)) for match in ENTRY_START.finditer(transcript)}
    event(f"shown: {'all' if len(shown) == len(messages) else 'some'}")
    for number in shown:  # a shown message names each of its images
        message = messages[number - 1]
        for block in message.content if isinstance(message.content, list) else []:
            url = block.get("image_url", {}).get("url", "") if isinstance(block, dict) else ""
            if url.startswith("https://"):
                assert transcript.count(url) == 1
    # Squeezed input uses its room: the bound is not met by throwing most of it away.
    bare = request_tokens(config, [HumanMessage(config.render_summary_prompt(""))])
    copies = config.summary_prompt.count("{messages}")
    full = render_messages(messages, 10**9, profile)
    if copies * estimate_tokens(full, profile) > budget - bare:
        assert tokens - bare >= (budget - bare) // 2
