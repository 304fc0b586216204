"""What a chat page has (issue 20, items 6, 7, 9): replies rendered from Markdown by the service
(sanitised), code blocks and messages with a copy button, a stop button while a reply streams (the
partial reply stays, marked stopped, also after a reload), long user messages folded — on a desktop and on a phone."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, Route, expect

from .conftest import WebService
from .support import SLOW_REPLY
from .ui import new_conversation, send, sign_in, wait_idle

pytestmark = pytest.mark.shared_data

VIEWPORTS = [pytest.param((1366, 900), id="desktop"), pytest.param((390, 844), id="phone")]


def at_size(page: Page, size: tuple[int, int]) -> None:
    page.set_viewport_size({"width": size[0], "height": size[1]})
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])


def clipboard(page: Page) -> Any:
    return page.evaluate("navigator.clipboard.readText()")


@pytest.mark.parametrize("size", VIEWPORTS)
def test_replies_render_markdown_and_copy(page: Page, web_service: WebService, size: tuple[int, int]) -> None:
    at_size(page, size)
    sign_in(page, web_service.url, web_service.token)
    new_conversation(page, "writer", title="Markdown")
    send(page, "给我一个三日行程")
    wait_idle(page)
    reply = page.locator("#chat-log .msg-assistant .msg-text").last
    for _ in range(2):  # as it arrived, and rebuilt from the record after a reload
        expect(reply).to_have_class("msg-text markdown")
        expect(reply.locator("h2")).to_have_text("北京三日行程")
        expect(reply.locator("li")).to_have_count(2)
        expect(reply.locator("table th")).to_have_text(["景点", "门票"])
        expect(reply.locator("table td").nth(3)).to_have_text("30 元")
        link = reply.get_by_role("link", name="官网")
        expect(link).to_have_attribute("href", "https://www.dpm.org.cn")
        expect(link).to_have_attribute("rel", "noopener noreferrer")
        expect(link).to_have_attribute("target", "_blank")
        # Sanitised: no javascript: link, inline HTML shown as text, no backticks or pipes left.
        expect(reply.locator("a")).to_have_count(1)
        expect(reply.locator("b")).to_have_count(0)
        expect(reply).to_contain_text("<b>原样</b>")
        assert "```" not in reply.inner_text() and "| ---" not in reply.inner_text()
        # The code block: its language and a copy button that copies the code only.
        block = reply.locator(".code-block")
        expect(block.locator(".code-language")).to_have_text("python")
        block.get_by_role("button", name="复制代码").click()
        expect(block.get_by_role("button", name="已复制")).to_be_visible()
        assert clipboard(page) == 'print("你好，北京")\n'
        # The message's copy button copies the Markdown as written.
        bubble = page.locator("#chat-log .msg-assistant").last
        bubble.locator(".msg-actions").get_by_role("button", name="复制").click()
        assert clipboard(page).startswith("## 北京三日行程\n\n- **第一天**")
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        page.screenshot(path=f"test-artifacts/markdown-{size[0]}.png")
        page.reload()
        expect(page.locator("#chat-log .msg-user")).to_have_count(1)


@pytest.mark.parametrize("size", VIEWPORTS)
def test_stop_keeps_the_partial_reply(page: Page, web_service: WebService, size: tuple[int, int]) -> None:
    at_size(page, size)
    sign_in(page, web_service.url, web_service.token)
    new_conversation(page, "writer")
    stop = page.get_by_role("button", name="停止")
    expect(stop).to_be_hidden()
    send(page, "请慢慢写一篇长文")
    expect(stop).to_be_visible()
    reply = page.locator("#chat-log .msg-assistant").last
    expect(reply).to_have_class("msg msg-assistant streaming")
    expect(reply.locator(".msg-text")).to_contain_text("第 3 段")
    stop.click()
    expect(reply).to_have_class("msg msg-assistant stopped")
    expect(reply.locator(".badge-stopped")).to_have_text("已停止 · 回复不完整")
    expect(stop).to_be_hidden()
    wait_idle(page)
    partial = reply.locator(".msg-text").inner_text()
    assert partial.startswith("第 1 段") and len(partial) < len(SLOW_REPLY.strip())
    expect(page.get_by_label("消息", exact=True)).to_be_focused()
    # The service kept the partial reply, marked stopped: a reload shows it the same way, once.
    page.reload()
    expect(page.locator("#chat-log .msg-user")).to_have_count(1)
    kept = page.locator("#chat-log .msg-assistant")
    expect(kept).to_have_count(1)
    expect(kept).to_have_class("msg msg-assistant stopped")
    expect(kept.locator(".badge-stopped")).to_have_text("已停止 · 回复不完整")
    assert kept.locator(".msg-text").inner_text() == partial
    # The conversation is usable again: the next message gets its whole reply.
    send(page, "现在写一个行程")
    wait_idle(page)
    expect(page.locator("#chat-log .msg-assistant .msg-text").last.locator("h2")).to_have_text("北京三日行程")


@pytest.mark.parametrize("size", VIEWPORTS)
def test_long_user_messages_fold(page: Page, web_service: WebService, size: tuple[int, int]) -> None:
    at_size(page, size)
    sign_in(page, web_service.url, web_service.token)
    new_conversation(page, "writer")
    long_text = "这是一段很长的说明。" * 150
    send(page, long_text)
    wait_idle(page)
    user = page.locator("#chat-log .msg-user").last
    body = user.locator(".msg-text")
    expect(body).to_have_class("msg-text clamped")
    folded = body.bounding_box()
    assert folded is not None and folded["height"] < 250
    user.get_by_role("button", name="展开全文").click()
    expect(body).to_have_class("msg-text")
    unfolded = body.bounding_box()
    assert unfolded is not None and unfolded["height"] > folded["height"] * 2
    user.get_by_role("button", name="复制").click()
    assert clipboard(page) == long_text


def test_a_message_and_its_run_stream_travel_in_one_request(page: Page, web_service: WebService) -> None:
    """Issue 17 (streaming load): the page posts its message to `POST …/runs/stream` and reads the
    run from that response, so on a busy service the reply's first text is not held back until a
    second request opens the stream (and then delivered late, as a catch-up). `GET …/events` is
    only for reconnecting, and for runs the page did not start."""
    requests: list[tuple[str, str]] = []
    page.on("request", lambda request: requests.append((request.method, request.url)))
    sign_in(page, web_service.url, web_service.token)
    new_conversation(page, "writer", title="One request")
    requests.clear()
    send(page, "给我一个三日行程")
    wait_idle(page)
    expect(page.locator("#chat-log .msg-assistant .msg-text").last.locator("h2")).to_have_text("北京三日行程")
    runs = [(method, url) for method, url in requests if "/runs" in url]
    assert [method for method, url in runs if url.endswith("/runs/stream")] == ["POST"], runs
    assert not [url for _, url in runs if url.endswith("/events")], runs
    assert not [url for method, url in runs if method == "POST" and url.endswith("/runs")], runs


def test_a_stream_that_ends_before_its_run_is_continued(page: Page, web_service: WebService) -> None:
    """A run's stream that ends cleanly before `run_finished` (a proxy's idle timeout, a process
    that stopped) is continued with `GET …/events` and `Last-Event-ID`, not taken for the run's
    end: the reply is shown whole, once. Here the browser gets the message's real answer cut after
    its first `message_delta` event."""
    cut_bodies: list[str] = []

    def cut_after_first_delta(route: Route) -> None:
        response = route.fetch()  # the whole stream: the run has finished when it returns
        blocks = response.text().replace("\r\n", "\n").split("\n\n")  # sse-starlette ends lines with CRLF
        first_delta = next(i for i, block in enumerate(blocks) if "event: message_delta" in block)
        cut = "\n\n".join(blocks[: first_delta + 1]) + "\n\n"
        cut_bodies.append(cut)
        route.fulfill(response=response, body=cut)

    resumed: list[str] = []
    page.on(
        "request",
        lambda request: (
            resumed.append(request.headers.get("last-event-id", ""))
            if request.url.endswith("/events")
            else None
        ),
    )
    sign_in(page, web_service.url, web_service.token)
    new_conversation(page, "writer", title="Cut stream")
    page.route("**/runs/stream", cut_after_first_delta)
    send(page, "给我一个三日行程")
    wait_idle(page)
    assert cut_bodies and "run_finished" not in cut_bodies[0]
    assert len(resumed) == 1 and resumed[0], resumed  # continued once, after what it had read
    replies = page.locator("#chat-log .msg-assistant .msg-text")
    expect(replies).to_have_count(1)
    expect(replies.last.locator("h2")).to_have_text("北京三日行程")
    expect(replies.last.locator("table td").nth(3)).to_have_text("30 元")
    expect(page.locator("#chat-log .note-error")).to_have_count(0)
