"""What the model is told about a tool call its run never answered, and why it was not answered.

A run can end with tool calls that have no result: the user cancelled it while `ask_user` waited
for an answer, cancelled it while a tool ran, the run failed mid-call, or the service process died
(SIGKILL, power loss) during the call and the lease recovery failed the run. Before the next
message the executor answers each such call (providers refuse unanswered calls), saying which of
these happened -- "the user did not answer" is only true of the first -- in the conversation's
language (Chinese or English, from the user's latest message).
"""

from __future__ import annotations

from typing import Final, Literal

from ctxpress.app.models.language import Language, detect_language
from ctxpress.app.server.db.models import RUN_CANCELLED, RUN_FAILED, Run

#: The error of a run whose process stopped answering (its lease expired): a crash or a kill.
LEASE_EXPIRED_ERROR: Final = (
    "the worker executing this run stopped before it finished (its lease expired); send the message again"
)
#: The error of a run the service shut down in the middle of.
SERVICE_STOPPED_ERROR: Final = "the service stopped while the run was executing"

UnansweredReason = Literal["user_did_not_answer", "service_restarted", "run_cancelled", "run_failed"]

PHRASES: Final[dict[UnansweredReason, tuple[str, str]]] = {
    "user_did_not_answer": (
        "（用户没有回答这个问题，该请求已取消。）",
        "(The user did not answer this question; the request was cancelled.)",
    ),
    "service_restarted": (
        "（执行这个工具调用时服务重启了，调用的结果未知；如仍需要，请重新调用。）",
        "(The service restarted while this tool call was running; its result is unknown. "
        "Call the tool again if it is still needed.)",
    ),
    "run_cancelled": (
        "（执行这个工具调用时运行被取消，调用的结果未知。）",
        "(The run was cancelled while this tool call was running; its result is unknown.)",
    ),
    "run_failed": (
        "（执行这个工具调用时运行失败，调用的结果未知。）",
        "(The run failed while this tool call was running; its result is unknown.)",
    ),
}


def unanswered_reason(*, waiting_for_user: bool, previous_run: Run | None) -> UnansweredReason:
    """Why the calls are unanswered: a question pending for the user, else how the last run ended."""
    if waiting_for_user:
        return "user_did_not_answer"
    if previous_run is not None and previous_run.status == RUN_FAILED:
        if previous_run.error in (LEASE_EXPIRED_ERROR, SERVICE_STOPPED_ERROR):
            return "service_restarted"
        return "run_failed"
    if previous_run is not None and previous_run.status == RUN_CANCELLED:
        return "run_cancelled"
    return "run_failed"


def unanswered_call_text(reason: UnansweredReason, language: Language) -> str:
    chinese, english = PHRASES[reason]
    return chinese if language == "zh" else english


def conversation_language(user_texts: list[str]) -> Language:
    """The language of the user's latest message (English when there is none)."""
    return detect_language(user_texts[-1]) if user_texts else "en"
