"""The page end to end in headless Chromium against the real service (SQLite, built-in model, real KB data).

- pressure rises with real retrieval results until the 85 % hint appears beside the button (S22);
  compressing (keyboard) drops the ring, shows the new summary and its history file (S17, S19);
  the summary never shows up as an assistant message (S21);
- a run waiting for input: its question is answered inline, a second message shows as queued, and
  the compress button answers 409 with the reason in words (S18);
- automatic compression inside a run shows its `context_compression` events (S20, S21), and the
  offloaded tool result can be opened from the workdir files.
Screenshots of the panel (desktop and 360 px) are saved under test-artifacts/.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from .conftest import MAIN_THRESHOLD_K, WebService
from .support import tool_message
from .ui import (
    RUN_TIMEOUT_MS,
    assert_no_summary_in_chat,
    chat_counts,
    conversation_id,
    expected_level,
    new_conversation,
    no_horizontal_overflow,
    record_counts,
    ring_percent,
    send,
    shoot_panel,
    sign_in,
    wait_idle,
    wait_ring_above,
)

pytestmark = pytest.mark.shared_data

#: Real queries over the CrossWOZ documents; each result adds several K tokens of Chinese JSON.
QUERIES = ["烤鸭", "故宫", "火锅 海淀区", "公园", "博物馆", "川菜", "咖啡", "长城", "寺", "酒店"]
TOKENS_TEXT = re.compile(r"^\d+(\.\d)?K / " + str(MAIN_THRESHOLD_K) + r"K tokens$")


def test_pressure_hint_then_compress_drops_the_ring_and_shows_the_summary(
    page: Page, web_service: WebService, artifacts: Path
) -> None:
    sign_in(page, web_service.url, web_service.token)
    new_conversation(page, "kb", title="北京美食与景点")
    compress_button = page.get_by_role("button", name="压缩上下文")
    hint = page.locator("#compress-hint")
    expect(compress_button).to_be_visible()  # the agent declares context_compression (S17)
    expect(hint).to_be_hidden()

    percent = 0
    levels = set()
    for query in QUERIES:
        send(page, tool_message(query, top_k=1))  # small steps: 85 % is reached before 100 %
        wait_idle(page)
        percent = wait_ring_above(page, percent)
        level = expected_level(percent)
        expect(page.locator("#pressure-ring")).to_have_class(re.compile(rf"\blevel-{level}\b"))
        levels.add(level)
        if percent >= 85:
            break
        expect(hint).to_be_hidden()  # below 85 %: no suggestion
    assert percent >= 85, f"pressure stayed at {percent}% after {len(QUERIES)} messages"
    expect(hint).to_be_visible()
    expect(hint).to_contain_text(f"{percent}%")
    expect(hint).to_contain_text("建议手动压缩")
    expect(page.locator("#pressure-tokens")).to_have_text(TOKENS_TEXT)  # one unit: K = 1024
    assert "ok" in levels and levels & {"warn", "high"}
    for part in ("system", "tools", "summary", "messages"):
        expect(page.locator(f'#breakdown [data-part="{part}"]')).not_to_have_text("–")
    expect(page.locator("#breakdown")).to_contain_text("系统提示")
    assert_no_summary_in_chat(page)
    shoot_panel(page, str(artifacts / "panel-desktop-suggest.png"))

    # Keyboard: focus the button and press Enter.
    compress_button.focus()
    page.keyboard.press("Enter")
    result = page.locator("#compress-result")
    expect(result).to_contain_text("压缩完成", timeout=RUN_TIMEOUT_MS)
    page.wait_for_function(
        "before => Number(document.querySelector('#pressure-ring').dataset.percent || 0) < before",
        arg=percent,
    )
    after = ring_percent(page)
    assert after < percent and after < 85, (percent, after)
    expect(hint).to_be_hidden()
    # S19: the manual request had no full request shape: the estimate is marked stale.
    expect(page.locator("#pressure-stale")).to_be_visible()
    # The new summary, re-read from the agent state, with its history file.
    summary_box = page.locator("#summary-box")
    expect(summary_box).to_contain_text("已摘要前")
    assert page.locator("#summary-text").inner_text().strip()
    history_button = summary_box.get_by_role("button", name=re.compile("打开历史文件"))
    expect(history_button).to_contain_text("conversation_history/")
    assert_no_summary_in_chat(page)

    # Compression added no chat message: the chat is exactly the record (S1, S21).
    conversation = conversation_id(page)
    assert chat_counts(page) == record_counts(web_service.server.base_url, web_service.token, conversation)

    history_button.click()
    viewer = page.get_by_role("dialog")
    expect(viewer).to_be_visible()
    expect(page.locator("#viewer-body")).to_contain_text("烤鸭")  # the summarised, older messages
    page.keyboard.press("Escape")
    expect(viewer).to_be_hidden()
    expect(history_button).to_be_focused()  # focus goes back to what opened the viewer

    # Workdir files: the history file and the offloaded large tool results.
    files = page.locator("#files-box")
    expect(files).to_contain_text("对话历史")
    expect(files).to_contain_text("大型工具结果")
    # Usage: the main model per model, and the summary-model line.
    usage = page.locator("#usage-box")
    expect(usage).to_contain_text("主模型 · ctxpress-builtin (ctxpress)")
    expect(usage.locator('[data-category="summary"]')).to_have_count(1)
    shoot_panel(page, str(artifacts / "panel-desktop-compressed.png"))
    page.screenshot(path=str(artifacts / "page-desktop.png"))

    # The next model call records a full figure again: the estimate is no longer stale (S19).
    send(page, "谢谢，总结一下我们聊过的餐馆。")
    wait_idle(page)
    expect(page.locator("#pressure-stale")).to_be_hidden(timeout=RUN_TIMEOUT_MS)
    assert_no_summary_in_chat(page)
    assert chat_counts(page) == record_counts(web_service.server.base_url, web_service.token, conversation)

    # 360 px wide: one region at a time; the status tab shows the panel without sideways scrolling.
    page.set_viewport_size({"width": 360, "height": 800})
    status_tab = page.get_by_role("button", name=re.compile("^状态"))
    expect(status_tab).to_be_visible()
    status_tab.click()
    expect(page.locator("#pressure-ring")).to_be_visible()
    expect(page.locator("#chat")).to_be_hidden()
    assert no_horizontal_overflow(page)
    page.locator("#panel").evaluate("panel => { panel.scrollTop = 0; }")
    page.screenshot(path=str(artifacts / "panel-360.png"))
    # The whole panel in one picture: a viewport as tall as the panel's content.
    height = page.evaluate(
        "() => document.querySelector('#panel').scrollHeight + document.querySelector('#panel').offsetTop"
    )
    page.set_viewport_size({"width": 360, "height": int(height) + 16})
    page.screenshot(path=str(artifacts / "panel-360-full.png"))
    page.set_viewport_size({"width": 360, "height": 800})
    page.get_by_role("button", name="对话", exact=True).click()
    expect(page.get_by_label("消息", exact=True)).to_be_visible()
    assert no_horizontal_overflow(page)
    page.screenshot(path=str(artifacts / "chat-360.png"))


def test_busy_answer_while_a_run_waits_for_input(
    page: Page, web_service: WebService, artifacts: Path
) -> None:
    sign_in(page, web_service.url, web_service.token)
    new_conversation(page, "kb-sf")
    send(page, "/ask 你想去北京的哪个区？")
    question = page.locator("form.interrupt")
    expect(question).to_be_visible(timeout=RUN_TIMEOUT_MS)
    expect(question).to_contain_text("你想去北京的哪个区？")
    answer_box = question.get_by_label("你的回答")
    expect(answer_box).to_be_focused()  # the question takes the focus from the message box

    # A second message while the first waits: accepted, shown as queued.
    send(page, "顺便推荐一家烤鸭店")
    queued = page.locator(".badge-queued")
    expect(queued).to_be_visible()
    expect(queued).to_contain_text("排队中")
    expect(queued).to_contain_text("等待你的回答")
    page.screenshot(path=str(artifacts / "chat-desktop-waiting.png"))

    # Manual compression now: 409 thread_busy, the reason in words.
    page.get_by_role("button", name="压缩上下文").click()
    result = page.locator("#compress-result")
    expect(result).to_contain_text("暂时无法压缩", timeout=RUN_TIMEOUT_MS)
    expect(result).to_contain_text("智能体正在等待你回答问题")
    expect(result).to_have_class(re.compile(r"\bis-error\b"))
    expect(page.locator("#busy-state")).to_contain_text("等待你的回答")
    shoot_panel(page, str(artifacts / "panel-desktop-busy.png"))

    # Answer inline (Enter): the run continues, then the queued request runs.
    answer_box.fill("海淀区")
    answer_box.press("Enter")
    expect(page.locator(".note-answered")).to_contain_text("已回答：海淀区")
    expect(queued).to_have_count(0, timeout=RUN_TIMEOUT_MS)
    wait_idle(page)
    expect(page.locator("details.tool-question .tool-state")).to_contain_text("海淀区")
    # The queued request ran after the answer: its block ends with an answer of the agent.
    last_run = page.locator("#chat-log .run").last
    expect(last_run.locator(".msg-user")).to_contain_text("顺便推荐一家烤鸭店")
    expect(last_run.locator(".msg-assistant").last).to_be_visible(timeout=RUN_TIMEOUT_MS)
    expect(page.locator("#busy-state")).to_contain_text("会话空闲", timeout=RUN_TIMEOUT_MS)
    # Usage under an excluded provider (S26).
    expect(page.locator("#usage-box")).to_contain_text("用量不可用")
    expect(page.locator("#usage-box")).to_contain_text("siliconflow-cn")


def test_compression_events_during_a_run(page: Page, web_service: WebService, artifacts: Path) -> None:
    sign_in(page, web_service.url, web_service.token)
    new_conversation(page, "kb-tight")
    send(page, tool_message("烤鸭", top_k=3))
    # The tool result alone passes the 4 K threshold: the next model call compacts it (L1).
    # Labelled by what happened (issue 20): the tool result was written to a file (L1).
    chip = page.locator("#chat-log .note-compression.compression-completed")
    expect(chip.first).to_be_visible(timeout=RUN_TIMEOUT_MS)
    expect(chip.first).to_contain_text("工具结果转存（L1）：1 个结果写入工作目录")
    events = page.locator("#compression-events")
    expect(events).to_have_attribute("aria-live", "polite")
    wait_idle(page)
    # The list is the service's record: one item per pass that wrote a file, no "started" halves.
    expect(events.locator("li")).to_have_count(1)
    expect(events.locator("li.event-completed")).to_contain_text("工具结果转存（L1）")
    expect(page.locator("#chat-log .note-compression")).to_have_count(1)
    assert_no_summary_in_chat(page)
    # The offloaded full result is a workdir file the person can open and read.
    large = page.locator("#files-box").get_by_role("list", name=re.compile("大型工具结果"))
    expect(large).to_be_visible(timeout=RUN_TIMEOUT_MS)
    large.get_by_role("button").first.click()
    viewer_body = page.locator("#viewer-body")
    expect(viewer_body).to_contain_text("烤鸭")
    expect(viewer_body).to_contain_text("crosswoz/restaurant_db.json")
    page.locator("#viewer-close").click()
    shoot_panel(page, str(artifacts / "panel-desktop-events.png"))


def test_a_failed_compression_names_the_part(page: Page, web_service: WebService) -> None:
    sign_in(page, web_service.url, web_service.token)
    new_conversation(page, "kb-broken")
    for query in ("烤鸭", "故宫"):
        send(page, tool_message(query, top_k=1))
        wait_idle(page)
    page.get_by_role("button", name="压缩上下文").click()
    result = page.locator("#compress-result")
    expect(result).to_contain_text("压缩失败（生成摘要）", timeout=RUN_TIMEOUT_MS)
    expect(result).to_have_class(re.compile(r"\bis-error\b"))
    # S28: nothing was published: still no summary, and the chat is unchanged.
    expect(page.locator("#summary-box")).to_contain_text("还没有摘要")
    assert_no_summary_in_chat(page)
