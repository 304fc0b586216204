"""The page in headless Chromium: sign in and token storage, conversations and reload, the capability
rule of the compress button (S17), language, keyboard, and the page's own modules (units, CRLF SSE)."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from ctxpress.pressure import SUGGEST_COMPRESS_RATIO
from ctxpress.summary.event import SUMMARY_MARKER

from .conftest import WebService
from .support import tool_message
from .ui import chat_counts, conversation_id, new_conversation, record_counts, send, sign_in, wait_idle

pytestmark = pytest.mark.shared_data

TOKEN_KEY = "ctxpress.token"


def storage(page: Page) -> dict[str, Any]:
    return page.evaluate(
        "key => ({session: sessionStorage.getItem(key), local: localStorage.getItem(key)})", TOKEN_KEY
    )


def test_sign_in_keeps_the_token_where_the_user_chose(page: Page, web_service: WebService) -> None:
    page.goto(web_service.url)
    token_box = page.get_by_label("API 令牌", exact=True)
    expect(token_box).to_be_focused()
    token_box.fill("cxp_not-a-real-token")
    page.get_by_role("button", name="登录").click()
    expect(page.get_by_role("alert").filter(has_text="令牌无效")).to_be_visible()
    assert storage(page) == {"session": None, "local": None}

    sign_in(page, web_service.url, web_service.token)  # not remembered: sessionStorage only
    assert storage(page) == {"session": web_service.token, "local": None}
    expect(page.locator("#who")).to_have_text("已登录：zhangsan")
    page.reload()
    expect(page.locator("#app")).to_be_visible()  # the tab keeps it across reloads

    page.get_by_role("button", name="退出").click()
    expect(page.locator("#signin")).to_be_visible()
    assert storage(page) == {"session": None, "local": None}

    sign_in(page, web_service.url, web_service.token, remember=True)
    assert storage(page) == {"session": None, "local": web_service.token}
    # Nothing of the token in the address bar or the markup.
    assert web_service.token not in page.url
    assert web_service.token not in page.content()


def test_conversations_reload_from_the_record(page: Page, web_service: WebService) -> None:
    sign_in(page, web_service.url, web_service.token)
    new_conversation(page, "kb", title="第一个会话")
    send(page, "你好，我想了解北京的景点。")
    wait_idle(page)
    send(page, tool_message("故宫", top_k=1))
    wait_idle(page)
    conversation = conversation_id(page)
    live = chat_counts(page)
    # What streamed in is exactly the record: one bubble per message, one item per tool call.
    assert live == record_counts(web_service.server.base_url, web_service.token, conversation)
    assert live["user"] == 2 and live["tool"] >= 1 and live["assistant"] >= 2
    tool = page.locator("#chat-log details.tool").last
    expect(tool).not_to_have_attribute("open", "")  # compact until expanded
    tool.locator("summary").click()
    expect(tool.locator(".tool-output")).to_contain_text("故宫")

    page.reload()  # the URL names the conversation; the chat is rebuilt from the record
    expect(page.locator("#chat-title")).to_have_text("第一个会话")
    expect(page.locator("#chat-log .msg-user")).to_have_count(live["user"])
    assert chat_counts(page) == live
    expect(page.locator("#chat-log .msg-user").first).to_contain_text("你好，我想了解北京的景点。")

    new_conversation(page, "kb", title="第二个会话")
    items = page.locator("#conversation-list button.conversation")
    expect(items).to_have_count(2)
    expect(items.first).to_contain_text("第二个会话")
    expect(items.first).to_have_attribute("aria-current", "true")
    items.nth(1).click()
    expect(page.locator("#chat-title")).to_have_text("第一个会话")
    expect(page.locator("#chat-log .msg-user")).to_have_count(live["user"])


def test_compress_button_only_for_agents_with_the_capability(page: Page, web_service: WebService) -> None:
    sign_in(page, web_service.url, web_service.token)
    new_conversation(page, "plain")
    send(page, tool_message("烤鸭", top_k=5))
    wait_idle(page)
    expect(page.locator("#pressure-ring")).to_have_attribute("data-level", re.compile("ok|warn|high"))
    expect(page.get_by_role("button", name="压缩上下文")).to_have_count(0)
    expect(page.locator("#compress-section")).to_be_hidden()
    new_conversation(page, "kb")
    expect(page.get_by_role("button", name="压缩上下文")).to_be_visible()


def test_language_switch_and_keyboard(page: Page, web_service: WebService) -> None:
    sign_in(page, web_service.url, web_service.token)
    new_conversation(page, "kb")
    page.get_by_role("button", name="Switch to English").click()
    assert page.evaluate("document.documentElement.lang") == "en"
    expect(page.get_by_role("button", name="Compress context")).to_be_visible()
    expect(page.locator("#panel-title")).to_have_text("Context status")
    expect(page.get_by_label("Message", exact=True)).to_be_visible()
    page.reload()  # the choice is remembered
    expect(page.get_by_role("button", name="Compress context")).to_be_visible()
    page.get_by_role("button", name="切换到中文").click()
    assert page.evaluate("document.documentElement.lang") == "zh-CN"
    expect(page.get_by_role("button", name="压缩上下文")).to_be_visible()

    # The first Tab stop of a fresh page is the skip link; it leads to the message box.
    page.reload()
    expect(page.locator("#composer")).to_be_visible()
    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="跳到输入框")
    expect(skip).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_label("消息", exact=True)).to_be_focused()
    # Shift+Enter is a new line, Enter sends.
    box = page.get_by_label("消息", exact=True)
    box.type("第一行")
    box.press("Shift+Enter")
    box.type("第二行")
    expect(box).to_have_value("第一行\n第二行")
    box.press("Enter")
    expect(box).to_have_value("")
    expect(page.locator("#chat-log .msg-user .msg-text")).to_have_text("第一行\n第二行")


def test_page_modules(page: Page, web_service: WebService) -> None:
    """The page's own helpers, run in the browser: one token unit (K = 1024), levels, the SSE parser,
    and the service's vocabulary (the suggestion ratio, the summary marker, …) as the page holds it."""
    page.goto(web_service.url)
    results = page.evaluate(
        """async () => {
          const f = await import('/static/js/format.js');
          const api = await import('/static/js/api.js');
          const vocabulary = await import('/static/js/vocabulary.js');
          const chat = await import('/static/js/chat.js');
          const bytes = new TextEncoder().encode(
            'id: 1\\r\\nevent: message_delta\\r\\ndata: {"delta":"你好"}\\r\\n\\r\\n: ping\\r\\n\\r\\n' +
            'id: 2\\nevent: run_finished\\ndata: {"status":\\ndata: "ok"}\\n\\n');
          // Split everywhere awkward: inside CRLF pairs and inside multi-byte characters.
          const cuts = [5, 6, 23, 40, 41, 42, 43, 44, 70, 71, bytes.length];
          let start = 0;
          const chunks = cuts.map(end => { const c = bytes.slice(start, end); start = end; return c; });
          const body = new ReadableStream({ start(controller) { chunks.forEach(c => controller.enqueue(c)); controller.close(); } });
          const events = [];
          for await (const e of api.readSse(body)) events.push(e);
          return {
            tokens: [f.formatTokens(950), f.formatTokens(1024), f.formatTokens(1536), f.formatTokens(24576), f.formatTokens(102400)],
            percent: [f.formatPercent(0.8712), f.formatPercent(1.37)],
            levels: [f.pressureLevel(0.74), f.pressureLevel(0.75), f.pressureLevel(0.89), f.pressureLevel(0.9)],
            vocabulary: vocabulary.VOCABULARY,
            frozen: Object.isFrozen(vocabulary.VOCABULARY.events),
            hidden: [chat.isSummaryText(vocabulary.VOCABULARY.summary_marker + ' 摘要'), chat.isSummaryText('摘要')],
            events,
            later: [api.laterEventId('41', '41-7'), api.laterEventId('41-7', '42'),
                    api.laterEventId('41-10', '41-9'), api.laterEventId('0', '3')],
          };
        }"""
    )
    assert results["tokens"] == ["950", "1K", "1.5K", "24K", "100K"]
    assert results["percent"] == ["87%", "137%"]
    assert results["levels"] == ["ok", "warn", "warn", "high"]
    # The page holds the service's own values, not copies of them.
    served = httpx.get(f"{web_service.server.base_url}/api/vocabulary").json()
    assert results["vocabulary"] == served
    assert results["vocabulary"]["suggest_ratio"] == SUGGEST_COMPRESS_RATIO
    assert results["vocabulary"]["summary_marker"] == SUMMARY_MARKER
    assert results["frozen"] is True
    assert results["hidden"] == [True, False]
    assert results["events"] == [
        {"event": "message_delta", "data": '{"delta":"你好"}', "id": "1"},
        {"event": "run_finished", "data": '{"status":\n"ok"}', "id": "2"},
    ]
    # SSE ids: `41` (stored) < `41-7` (a live delta after it) < `42`; the page resumes from the later.
    assert results["later"] == ["41-7", "42", "41-10", "3"]
