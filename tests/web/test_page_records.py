"""Issue 20 in the browser, at 1366×900 and 390×844: the panel's figures agree (items 1, 2), the
compression list comes from the service's record and survives a reload, labelled by what happened,
with a divider in the chat at each summary's cutoff (item 3), summaries without internal markers in
the conversation's language (item 4), words from codes (item 5), conversations renamed, archived,
searched and titled from the first question (item 8), the per-message limit and a ring label that
stays inside (item 10), focus in the message box after opening a conversation (item 11), the busy
text cleared and the compress button explained on an empty conversation (item 12).
Screenshots for the docs are written under test-artifacts/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from .conftest import WebService
from .support import tool_message
from .ui import RUN_TIMEOUT_MS, new_conversation, send, shoot_panel, sign_in, wait_idle

pytestmark = pytest.mark.shared_data

VIEWPORTS = [pytest.param((1366, 900), id="desktop"), pytest.param((390, 844), id="phone")]
TOKENS = re.compile(r"^([\d.]+K?) / ")
RESULT = re.compile(r"下一次请求 ([\d.]+K?) → ([\d.]+K?) tokens")


def show(page: Page, view: str) -> None:
    """On a phone one region shows at a time: pick it with its tab."""
    if page.locator(".tabs").is_visible():
        names = {"list": "会话", "chat": "对话", "panel": re.compile("^状态")}
        page.get_by_role("button", name=names[view], exact=view != "panel").click()


@pytest.mark.parametrize("size", VIEWPORTS)
def test_l1_only_turn_and_the_record_of_events(
    page: Page, web_service: WebService, artifacts: Path, size: tuple[int, int]
) -> None:
    page.set_viewport_size({"width": size[0], "height": size[1]})
    sign_in(page, web_service.url, web_service.token)
    new_conversation(page, "kb-tight", title="L1")
    send(page, tool_message("烤鸭", top_k=3))
    wait_idle(page)
    show(page, "panel")
    ring = page.locator("#pressure-ring")
    # Item 1: the raw request is over the 4 K threshold, the request as sent (after L1) is not;
    # the ring shows the latter, says the former in words, and suggests nothing.
    raw = page.locator("#pressure-raw")
    expect(raw).to_be_visible(timeout=RUN_TIMEOUT_MS)
    expect(raw).to_contain_text("未转存时为")
    assert int(ring.get_attribute("data-percent") or "0") < 85
    expect(page.locator("#compress-hint")).to_be_hidden()
    events = page.locator("#compression-events li")
    expect(events).to_have_count(1)
    expect(events.first).to_contain_text("工具结果转存（L1）：1 个结果写入工作目录")
    if size[0] > 1000:
        shoot_panel(page, str(artifacts / "panel-l1-only.png"))

    page.reload()  # item 3: the list is the service's record
    show(page, "panel")
    expect(events).to_have_count(1)
    expect(events.first).to_contain_text("工具结果转存（L1）")
    expect(page.locator("#events-empty")).to_be_hidden()
    if size[0] > 1000:
        shoot_panel(page, str(artifacts / "events-after-reload.png"))


@pytest.mark.parametrize("size", VIEWPORTS)
def test_manual_summaries_agree_with_the_ring_and_mark_the_chat(
    page: Page, web_service: WebService, artifacts: Path, size: tuple[int, int]
) -> None:
    page.set_viewport_size({"width": size[0], "height": size[1]})
    sign_in(page, web_service.url, web_service.token)
    new_conversation(page, "kb")
    show(page, "panel")
    button = page.get_by_role("button", name="压缩上下文")
    result = page.locator("#compress-result")
    # Item 12: nothing to compress in an empty conversation, and the button says so.
    expect(button).to_have_attribute("aria-disabled", "true")
    button.focus()  # still focusable (aria-disabled): pressing it explains why nothing happens
    page.keyboard.press("Enter")
    expect(result).to_have_text("会话还没有消息，没有可压缩的内容。")

    show(page, "chat")
    for text in ("你好，我想去北京玩三天。", tool_message("故宫", top_k=1), "预算是每天 500 元。"):
        send(page, text)
        wait_idle(page)
    show(page, "panel")
    button.click()
    expect(result).to_contain_text("压缩完成", timeout=RUN_TIMEOUT_MS)
    # Item 2: one definition — the result line's "after" is the ring's figure.
    match = RESULT.search(result.inner_text())
    assert match, result.inner_text()
    expect(page.locator("#pressure-tokens")).to_have_text(re.compile(rf"^{re.escape(match.group(2))} / "))
    events = page.locator("#compression-events li")
    expect(events.first).to_contain_text("第 1 次摘要（手动）")
    # Item 4: the summary in the conversation's language, no marker.
    summary = page.locator("#summary-text")
    expect(summary).to_contain_text("【抽取式摘要】")
    expect(summary).to_contain_text("用户的目标与要求")
    if size[0] > 1000:
        shoot_panel(page, str(artifacts / "panel-after-manual-compression.png"))

    # Item 5: once nothing new is left to summarise, it says so from the answer's code, in Chinese.
    summaries = 1
    nothing = re.compile(r"^无需压缩：上次摘要后只有 \d+ 条消息，至少需要 3 条")
    for _ in range(3):
        button.click()
        expect(result).not_to_have_text("正在压缩…", timeout=RUN_TIMEOUT_MS)
        if nothing.search(result.inner_text()):
            break
        summaries += 1  # the first summary kept a tool call with its result: more to summarise
    expect(result).to_have_text(nothing)

    show(page, "chat")
    send(page, "第二天想去颐和园。")
    wait_idle(page)
    send(page, "第三天去长城。")
    wait_idle(page)
    show(page, "panel")
    button.click()
    expect(result).to_contain_text("压缩完成", timeout=RUN_TIMEOUT_MS)
    summaries += 1
    expect(events.first).to_contain_text(f"第 {summaries} 次摘要（手动）")
    expect(summary).not_to_contain_text("[ctxpress:")  # repeated summaries: still no marker
    expect(summary).not_to_contain_text("Summary of the earlier")

    # Item 3: a divider at each summary's cutoff, also after a reload.
    for _ in range(2):
        show(page, "chat")
        dividers = page.locator("#chat-log .summary-divider")
        expect(dividers).to_have_count(summaries)
        expect(dividers.first).to_contain_text("以上较早的消息已手动摘要（第 1 次摘要）")
        page.reload()
        expect(page.locator("#chat-log .msg-user").first).to_be_visible()
    if size[0] > 1000:
        page.screenshot(path=str(artifacts / "chat-summary-divider.png"))

    # Item 12: the history file reads as messages (not literal JSON), with the file as written a click away.
    show(page, "panel")
    page.locator("#summary-box").get_by_role("button", name=re.compile("打开历史文件")).click()
    messages = page.locator("#viewer-messages")
    expect(messages).to_be_visible()
    expect(messages.locator(".viewer-msg-human").first).to_contain_text("你好，我想去北京玩三天。")
    assert "\\n" not in messages.inner_text()
    expect(page.locator("#viewer-body")).to_be_hidden()
    close = page.locator("#viewer-close")
    close_box = close.bounding_box()
    assert close_box is not None and close_box["height"] < 50  # one line, beside a long path
    page.get_by_role("button", name="显示原始内容").click()
    expect(page.locator("#viewer-body")).to_be_visible()
    expect(page.locator("#viewer-body")).to_contain_text('"type": "human"')
    expect(messages).to_be_hidden()
    close.click()


@pytest.mark.parametrize("size", VIEWPORTS)
def test_conversations_rename_archive_search_and_titles(
    page: Page, web_service: WebService, size: tuple[int, int]
) -> None:
    page.set_viewport_size({"width": size[0], "height": size[1]})
    sign_in(page, web_service.url, web_service.token)
    new_conversation(page, "writer")
    # Item 10: the agent's per-message limit shows before anything is sent.
    expect(page.locator("#composer-limit")).to_contain_text("单条消息上限约")
    send(page, "帮我规划北京三日游")
    wait_idle(page)
    expect(page.locator("#chat-title")).to_have_text("帮我规划北京三日游")  # item 8: from the question
    new_conversation(page, "writer", title="Shopping")
    show(page, "list")
    items = page.locator("#conversation-list li.conversation-item")
    expect(items).to_have_count(2)

    # Rename in place (Enter saves).
    items.filter(has_text="帮我规划北京三日游").get_by_role("button", name="重命名").click()
    box = page.get_by_label("新标题")
    expect(box).to_be_focused()
    box.fill("北京行程")
    box.press("Enter")
    expect(items.first.or_(items.nth(1)).filter(has_text="北京行程")).to_have_count(1)

    # Search by title.
    search = page.get_by_label("搜索标题")
    search.fill("shop")
    expect(items).to_have_count(1)
    expect(items.first).to_contain_text("Shopping")
    search.fill("")
    expect(items).to_have_count(2)

    # Archive: hidden, found among the archived, and back.
    items.filter(has_text="Shopping").get_by_role("button", name=re.compile("^归档")).click()
    expect(items).to_have_count(1)
    page.get_by_label("只看已归档").check()
    expect(items).to_have_count(1)
    expect(items.first).to_contain_text("Shopping")
    items.first.get_by_role("button", name="取消归档").click()
    expect(items).to_have_count(0)
    page.get_by_label("只看已归档").uncheck()
    expect(items).to_have_count(2)

    # Item 11: opening a conversation with Enter puts the focus in the message box.
    items.filter(has_text="北京行程").locator("button.conversation").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_label("消息", exact=True)).to_be_focused()
    expect(page.locator("#chat-title")).to_have_text("北京行程")
    page.keyboard.type("继续")
    expect(page.get_by_label("消息", exact=True)).to_have_value("继续")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_ring_label_and_words_from_codes(page: Page, web_service: WebService) -> None:
    """Item 10: the label stays inside the circle; item 5: answers are put in words from their codes."""
    page.goto(web_service.url)
    results = page.evaluate(
        """async () => {
          const panel = await import('/static/js/panel.js');
          const chat = await import('/static/js/chat.js');
          const api = await import('/static/js/api.js');
          const busy = new api.ApiError(409, {code: 'thread_busy', message: 'conversation is busy', reason: 'compressing'});
          const big = new api.ApiError(413, {code: 'message_too_large', message: 'the message is about…',
            details: {estimated_tokens: 50000, max_message_tokens: 20480}});
          return {
            ring: [panel.ringPercent(0.874), panel.ringPercent(9.99), panel.ringPercent(32.45)],
            nothing: panel.describeNothingCompressed({reason_code: 'no_safe_cutoff', reason: 'no safe cutoff: …'}),
            busy: chat.describeError(busy),
            big: chat.describeError(big),
            body: panel.summaryBody('[ctxpress:summary] Summary of the earlier conversation.\\n\\n要点\\n- [ctxpress:summary] 旧的\\n- 新的'),
          };
        }"""
    )
    assert results["ring"] == ["87%", "999%", "999%+"]
    assert results["nothing"].startswith("无需压缩：较早的消息都属于尚未完成的工具调用")
    assert results["busy"] == "正在压缩上下文，请稍候。"
    assert results["big"].startswith("消息太长：约 48.8K tokens，此智能体单条消息最多约 20K tokens")
    assert results["body"] == "要点\n- 新的"


@pytest.mark.parametrize("size", VIEWPORTS)
def test_suggestions_in_an_empty_conversation(
    page: Page, web_service: WebService, size: tuple[int, int]
) -> None:
    """Item 13: the built-in agent's phrases, offered where a new user starts; one click fills the box."""
    page.set_viewport_size({"width": size[0], "height": size[1]})
    sign_in(page, web_service.url, web_service.token)
    new_conversation(page, "kb")
    suggestions = page.get_by_role("region", name=re.compile("可以这样开始"))
    expect(suggestions).to_be_visible()
    expect(suggestions.get_by_role("button")).to_have_count(5)
    suggestions.get_by_role("button", name="工作目录里有哪些文件？").click()
    box = page.get_by_label("消息", exact=True)
    expect(box).to_have_value("工作目录里有哪些文件？")
    expect(box).to_be_focused()
    box.press("Enter")
    expect(suggestions).to_have_count(0)
    wait_idle(page)
    expect(page.locator("#chat-log details.tool .tool-name").first).to_have_text("list_files")
    new_conversation(page, "writer")  # a real model: no phrases to suggest
    expect(page.locator("#chat-log .suggestions")).to_have_count(0)
