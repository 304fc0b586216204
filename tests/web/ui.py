"""What a person does on the page, as Playwright steps (sign in, open a conversation, send, wait)."""

from __future__ import annotations

import re
from typing import Any

import httpx
from playwright.sync_api import Locator, Page, expect

RUN_TIMEOUT_MS = 60_000


def sign_in(page: Page, url: str, token: str, *, remember: bool = False) -> None:
    page.goto(url)
    page.get_by_label("API 令牌", exact=True).fill(token)
    if remember:
        page.get_by_label("在此设备上记住", exact=False).check()
    page.get_by_role("button", name="登录").click()
    expect(page.locator("#app")).to_be_visible()


def new_conversation(page: Page, agent: str, title: str = "") -> None:
    if page.locator(".tabs").is_visible():
        page.get_by_role("button", name="会话", exact=True).click()
    page.get_by_label("智能体", exact=True).select_option(agent)
    page.get_by_label("标题（可选）", exact=True).fill(title)
    page.get_by_role("button", name="新建会话").click()
    expect(page.locator("#composer")).to_be_visible()
    expect(page.locator("#chat-agent")).to_contain_text(f"智能体：{agent}")


def send(page: Page, text: str) -> None:
    """Type and press Enter (the keyboard path); the message box empties once the service accepted it."""
    box = page.get_by_label("消息", exact=True)
    box.fill(text)
    box.press("Enter")
    expect(box).to_have_value("", timeout=RUN_TIMEOUT_MS)


def wait_idle(page: Page) -> None:
    """Every run the page follows has ended (finished or waiting for an answer)."""
    expect(page.locator("#chat-log")).not_to_have_attribute("aria-busy", "true", timeout=RUN_TIMEOUT_MS)


def ring_percent(page: Page) -> int:
    value = page.locator("#pressure-ring").get_attribute("data-percent") or ""
    return int(value) if value else 0


def wait_ring_above(page: Page, previous: int) -> int:
    """The panel re-read the context after a run: the pressure grew past `previous`."""
    page.wait_for_function(
        "previous => Number(document.querySelector('#pressure-ring').dataset.percent || 0) > previous",
        arg=previous,
        timeout=RUN_TIMEOUT_MS,
    )
    return ring_percent(page)


def expected_level(percent: int) -> str:
    """Ring colours change at 75 % and 90 % of the threshold."""
    return "high" if percent >= 90 else "warn" if percent >= 75 else "ok"


def assert_no_summary_in_chat(page: Page) -> None:
    """S21: summary text never appears as a chat message (the summary message's marker and header)."""
    for text in page.locator("#chat-log .msg-text").all_inner_texts():
        assert "[ctxpress:summary]" not in text, text
        assert "Summary of the earlier conversation" not in text, text


def conversation_id(page: Page) -> str:
    match = re.search(r"#/c/([^/]+)$", page.url)
    assert match, page.url
    return match.group(1)


def record_counts(base_url: str, token: str, conversation: str) -> dict[str, int]:
    """User and (non-empty) assistant messages of the chat record, read from the API."""
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"}) as client:
        response = client.get(f"/api/conversations/{conversation}/messages", params={"limit": 500})
    items = response.json()["items"]
    return {
        "user": sum(1 for item in items if item["role"] == "user"),
        "assistant": sum(1 for item in items if item["role"] == "assistant" and item["content"].strip()),
        "tool": sum(1 for item in items if item["role"] == "tool"),
    }


def chat_counts(page: Page) -> dict[str, int]:
    return {
        "user": page.locator("#chat-log .msg-user").count(),
        "assistant": page.locator("#chat-log .msg-assistant").count(),
        "tool": page.locator("#chat-log details.tool").count(),
    }


def panel(page: Page) -> Locator:
    return page.locator("#panel")


def shoot_panel(page: Page, path: str) -> None:
    """A screenshot of the status panel, scrolled to its top (a test artifact)."""
    panel(page).evaluate("element => { element.scrollTop = 0; }")
    panel(page).screenshot(path=path)


def no_horizontal_overflow(page: Page) -> Any:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
