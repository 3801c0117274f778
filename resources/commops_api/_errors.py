"""The client's exceptions. Messages say what failed, where, and what to do; none carries the API key."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """The API answered with an error the client does not retry (or a request could not be completed)."""

    def __init__(self, message: str, *, status_code: int | None = None, code: str | None = None, details: Any = None):
        super().__init__(message)
        self.status_code = status_code
        self.code = code
        self.details = details


class AuthenticationError(ApiError):
    """401: the API key is missing, unknown or revoked."""


class ScopeError(ApiError):
    """403: the key lacks the scope the operation needs (`required_scope` names it when the server does)."""

    def __init__(self, message: str, *, required_scope: str | None = None, **kwargs: Any):
        super().__init__(message, **kwargs)
        self.required_scope = required_scope


class NotFoundError(ApiError):
    """404: the resource does not exist (or belongs to another organization)."""


class RequestBudgetExceeded(ApiError):
    """The run has used all the requests `max_requests_per_run` allows."""


class IncompleteDataError(ApiError):
    """Paging could not prove a complete listing of the endpoint, even after repair passes.

    `unsettled_ids` names the rows it could not settle: seen by an earlier pass but gone from the last
    one, or created during the last one (rows never seen cannot be named; `expected - seen` counts them)."""

    def __init__(self, message: str, *, endpoint: str, expected: int, seen: int, unsettled_ids: list[str] | None = None):
        super().__init__(message)
        self.endpoint = endpoint
        self.expected = expected
        self.seen = seen
        self.unsettled_ids = unsettled_ids or []


class ApiUnavailableError(ApiError):
    """Transient failures (5xx, timeouts, dropped connections, broken bodies) outlasted every retry."""
