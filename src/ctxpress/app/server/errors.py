"""Every error the service answers with: one tree of named errors, one code each, one body.

    {"error": {"code": "thread_busy", "message": "…", <the error's own fields>, "details"?: …}}

Services and routes raise them; `app.py` turns FastAPI's own errors (validation, routing, an
unexpected exception) into them too, and renders every one with `ServiceError.body()`. The extra
fields (`reason` of `thread_busy`, `part` of `compression_failed`) are attributes of the error that
carries them. `ErrorCode` is the one list of codes (the page reads it from `GET /api/vocabulary`).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from ctxpress.app.server.repositories.runs import BusyReason, BusyState


class ErrorCode(StrEnum):
    BAD_REQUEST = "bad_request"
    MALFORMED_JSON = "malformed_json"
    INVALID_PATH = "invalid_path"
    INPUT_TOO_LONG = "input_too_long"
    INVALID_LAST_EVENT_ID = "invalid_last_event_id"
    UNKNOWN_AGENT = "unknown_agent"
    COMPRESSION_NOT_SUPPORTED = "compression_not_supported"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    CONFLICT = "conflict"
    USER_EXISTS = "user_exists"
    THREAD_BUSY = "thread_busy"
    RUN_NOT_WAITING = "run_not_waiting"
    UNKNOWN_INTERRUPT = "unknown_interrupt"
    INTERRUPT_ID_REQUIRED = "interrupt_id_required"
    RUN_FINISHED = "run_finished"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    VALIDATION_ERROR = "validation_error"
    HTTP_ERROR = "http_error"
    INTERNAL_ERROR = "internal_error"
    COMPRESSION_FAILED = "compression_failed"
    MESSAGE_TOO_LARGE = "message_too_large"
    UNKNOWN_USER = "unknown_user"
    TOKEN_NOT_FOUND = "token_not_found"
    TOO_MANY_FAILED_AUTHENTICATIONS = "too_many_failed_authentications"


class ServiceError(Exception):
    """The root of the tree; `status_code` and `code` are set by each named error."""

    status_code: int = 500
    code: ErrorCode = ErrorCode.INTERNAL_ERROR
    #: Headers the answer carries besides the JSON body (e.g. `Retry-After`).
    headers: Mapping[str, str] | None = None

    def __init__(self, message: str, *, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def fields(self) -> dict[str, Any]:
        """The error's own fields of the body, beside `code` and `message` (none by default)."""
        return {}

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message, **self.fields()}
        if self.details is not None:
            error["details"] = self.details
        return {"error": error}


class InternalError(ServiceError):
    """Anything unexpected: the body says no more than that (the log has the traceback)."""


# --- 400 -------------------------------------------------------------------------------------------


class BadRequestError(ServiceError):
    status_code = 400
    code = ErrorCode.BAD_REQUEST


class MalformedJsonError(BadRequestError):
    code = ErrorCode.MALFORMED_JSON


class InvalidPathError(BadRequestError):
    """A workdir path that leaves the workdir or is not a valid relative path."""

    code = ErrorCode.INVALID_PATH


class InputTooLongError(BadRequestError):
    code = ErrorCode.INPUT_TOO_LONG


class InvalidLastEventIdError(BadRequestError):
    code = ErrorCode.INVALID_LAST_EVENT_ID


class UnknownAgentError(BadRequestError):
    """A request names an agent that is not configured."""

    code = ErrorCode.UNKNOWN_AGENT


class CompressionNotSupportedError(BadRequestError):
    """The conversation's agent does not declare the `context_compression` capability (S17)."""

    code = ErrorCode.COMPRESSION_NOT_SUPPORTED


# --- 401, 403, 404, 405 ----------------------------------------------------------------------------


class UnauthorizedError(ServiceError):
    status_code = 401
    code = ErrorCode.UNAUTHORIZED
    headers: Mapping[str, str] | None = {"WWW-Authenticate": "Bearer"}


class ForbiddenError(ServiceError):
    status_code = 403
    code = ErrorCode.FORBIDDEN


class NotFoundError(ServiceError):
    """Also the answer for another user's resources: their existence is not revealed."""

    status_code = 404
    code = ErrorCode.NOT_FOUND


class AgentNotConfiguredError(NotFoundError):
    """A conversation's agent is not configured any more."""

    code = ErrorCode.UNKNOWN_AGENT


class MethodNotAllowedError(ServiceError):
    status_code = 405
    code = ErrorCode.METHOD_NOT_ALLOWED


# --- 409: the resource is in the wrong state -------------------------------------------------------


class ConflictError(ServiceError):
    status_code = 409
    code = ErrorCode.CONFLICT


class UserExistsError(ConflictError):
    code = ErrorCode.USER_EXISTS


class ThreadBusyError(ConflictError):
    """S18: a running run, a run waiting for user input, a queued request, or a manual compression
    holding the conversation; `reason` says which. With `retry_after` (seconds) the answer carries
    `Retry-After`: a message sent while the conversation is compressed is refused at once rather
    than left waiting for the lock."""

    code = ErrorCode.THREAD_BUSY

    def __init__(
        self, busy: BusyState, message: str | None = None, *, retry_after: int | None = None
    ) -> None:
        details: dict[str, Any] = {"active_run_id": busy.active_run_id, "queued_runs": busy.queued_runs}
        if retry_after is not None:
            details["retry_after"] = retry_after
            self.headers = {"Retry-After": str(retry_after)}
        super().__init__(
            message or f"the conversation is busy ({busy.reason}); compress when it is idle", details=details
        )
        self.reason: BusyReason = busy.reason

    def fields(self) -> dict[str, Any]:
        return {"reason": self.reason}


class RunNotWaitingError(ConflictError):
    code = ErrorCode.RUN_NOT_WAITING


class UnknownInterruptError(ConflictError):
    code = ErrorCode.UNKNOWN_INTERRUPT


class InterruptIdRequiredError(ConflictError):
    code = ErrorCode.INTERRUPT_ID_REQUIRED


class RunFinishedError(ConflictError):
    code = ErrorCode.RUN_FINISHED


# --- 413, 415, 422 ---------------------------------------------------------------------------------


class PayloadTooLargeError(ServiceError):
    status_code = 413
    code = ErrorCode.PAYLOAD_TOO_LARGE


class UnsupportedMediaTypeError(ServiceError):
    status_code = 415
    code = ErrorCode.UNSUPPORTED_MEDIA_TYPE


class RequestValidationFailedError(ServiceError):
    """The request does not match its schema; `details` lists where and what (never the input)."""

    status_code = 422
    code = ErrorCode.VALIDATION_ERROR


class MessageTooLargeError(PayloadTooLargeError):
    """A user message whose estimate alone exceeds what the agent accepts in one message (issue 19)."""

    code = ErrorCode.MESSAGE_TOO_LARGE


class UnknownUserError(NotFoundError):
    code = ErrorCode.UNKNOWN_USER


class TokenNotFoundError(NotFoundError):
    code = ErrorCode.TOKEN_NOT_FOUND


class TooManyFailedAuthenticationsError(ServiceError):
    """429 with `Retry-After: <seconds>` while a client address is held back."""

    status_code = 429
    code = ErrorCode.TOO_MANY_FAILED_AUTHENTICATIONS

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message, details={"retry_after": retry_after})
        self.retry_after = retry_after
        self.headers = {"Retry-After": str(retry_after)}


# --- 500 / 502: manual compression ----------------------------------------------------------------


class CompressionFailedError(ServiceError):
    """S28: a part of manual compression failed (`part` says which); nothing was published.

    The status depends on the part (the summary model is an upstream service: 502), so the
    caller gives it.
    """

    code = ErrorCode.COMPRESSION_FAILED

    def __init__(self, part: str, message: str, *, status_code: int) -> None:
        super().__init__(message)
        self.part = part
        self.status_code = status_code

    def fields(self) -> dict[str, Any]:
        return {"part": self.part}


class HttpError(ServiceError):
    """An HTTP status the router answers (e.g. 405) with no named error of its own."""

    code = ErrorCode.HTTP_ERROR

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code


_BY_STATUS: Final[Mapping[int, type[ServiceError]]] = {
    error.status_code: error
    for error in (
        BadRequestError,
        UnauthorizedError,
        ForbiddenError,
        NotFoundError,
        MethodNotAllowedError,
        PayloadTooLargeError,
        UnsupportedMediaTypeError,
    )
}


def error_for_status(status_code: int, message: str) -> ServiceError:
    """The named error of a bare HTTP status (the router's 404 and 405, a body too large)."""
    named = _BY_STATUS.get(status_code)
    return named(message) if named is not None else HttpError(status_code, message)
