"""Query parameters, declared once: parsed strictly by `parse` and documented by `openapi`.

Rules: comma-separated values for multi-valued filters (repeating the parameter works
too; an empty item is an error); booleans are `true` or `false`; integers are plain
digits within their bounds; date-times are ISO 8601 with a time zone; no value may
hold a control character (U+0000-U+001F, U+007F: a NUL would otherwise cut a search
term short). Any violation is 400 invalid_request naming the parameter in
details.field. Unknown parameters are ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fastapi import Request

from commops_spec.constants import DEFAULT_PER_PAGE, MAX_PER_PAGE, SORT_ORDERS
from service.errors import invalid
from service.store.db import to_iso
from service.store.listing import Paging

MAX_PAGE = 1_000_000
_DIGITS = re.compile(r"[0-9]{1,9}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # int | bool | choice | choices | tokens | text | datetime
    description: str
    choices: tuple[str, ...] = ()
    default: Any = None
    minimum: int | None = None
    maximum: int | None = None

    def openapi(self) -> dict[str, Any]:
        schema: dict[str, Any]
        if self.kind == "int":
            schema = {"type": "integer", "minimum": self.minimum, "maximum": self.maximum}
        elif self.kind == "bool":
            schema = {"type": "boolean"}
        elif self.kind == "choice":
            schema = {"type": "string", "enum": list(self.choices)}
        elif self.kind == "choices":
            schema = {"type": "array", "items": {"type": "string", "enum": list(self.choices)}}
        elif self.kind == "tokens":
            schema = {"type": "array", "items": {"type": "string", "pattern": "^[^,]+$"}}
        elif self.kind == "datetime":
            schema = {"type": "string", "format": "date-time"}
        else:
            schema = {"type": "string"}
        if self.default is not None:
            schema["default"] = self.default
        param: dict[str, Any] = {"name": self.name, "in": "query", "required": False,
                                 "description": self.description, "schema": schema}
        if schema["type"] == "array":
            param.update(style="form", explode=False)
        return param


def documented(params: list[Param]) -> dict[str, Any]:
    """The route's openapi_extra that documents `params`."""
    return {"parameters": [param.openapi() for param in params]}


def page_params() -> list[Param]:
    return [
        Param("page", "int", "Page number, from 1.", default=1, minimum=1, maximum=MAX_PAGE),
        Param("per_page", "int", f"Items per page, 1 to {MAX_PER_PAGE}.", default=DEFAULT_PER_PAGE,
              minimum=1, maximum=MAX_PER_PAGE),
    ]


def sort_params(fields: tuple[str, ...], default: str) -> list[Param]:
    return [
        Param("sort", "choice", "Sort field; ties are broken by id in the same direction.", fields, default),
        Param("order", "choice", "Sort order.", SORT_ORDERS, "desc"),
    ]


def paging(values: dict[str, Any]) -> Paging:
    """The page and order that parsed page_params() and sort_params() ask for."""
    return Paging(values["page"], values["per_page"], values["sort"], values["order"])


def parse(request: Request, params: list[Param]) -> dict[str, Any]:
    """Values of `params` in the request's query string, with defaults; 400 on bad input."""
    query = request.query_params
    values: dict[str, Any] = {}
    for param in params:
        raw = query.getlist(param.name)
        values[param.name] = _value(param, raw) if raw else param.default
    return values


def _value(param: Param, raw: list[str]) -> Any:
    name = param.name
    if any(_CONTROL.search(value) for value in raw):
        raise invalid(name, "invalid_character", f"{name} contains a control character (e.g. NUL); remove it",
                      location="query")
    if param.kind in ("choices", "tokens"):
        items = [item.strip() for value in raw for item in value.split(",")]
        if "" in items:
            raise invalid(name, "empty_value", f"{name} has an empty value; give comma-separated values",
                          location="query")
        if param.kind == "choices":
            for item in items:
                if item not in param.choices:
                    raise invalid(name, "invalid_choice",
                                  f"Invalid value {item!r} for {name}; allowed: {', '.join(param.choices)}",
                                  location="query", allowed=list(param.choices))
        return list(dict.fromkeys(items)) or None
    value = raw[-1]
    if param.kind == "text":
        return value or None
    if param.kind == "int":
        if not _DIGITS.fullmatch(value):
            raise invalid(name, "not_an_integer", f"{name} must be an integer, got {value!r}", location="query")
        number = int(value)
        if number < param.minimum or number > param.maximum:
            raise invalid(name, "out_of_range", f"{name} must be between {param.minimum} and {param.maximum}",
                          location="query", minimum=param.minimum, maximum=param.maximum)
        return number
    if param.kind == "bool":
        if value not in ("true", "false"):
            raise invalid(name, "not_a_boolean", f"{name} must be true or false, got {value!r}", location="query")
        return value == "true"
    if param.kind == "choice":
        if value not in param.choices:
            raise invalid(name, "invalid_choice",
                          f"Invalid value {value!r} for {name}; allowed: {', '.join(param.choices)}",
                          location="query", allowed=list(param.choices))
        return value
    if param.kind == "datetime":
        return _timestamp(name, value)
    raise AssertionError(f"unknown parameter kind {param.kind}")


def _timestamp(name: str, value: str) -> str:
    text = value.strip().upper()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        moment = None
    if moment is None or "T" not in text:
        raise invalid(name, "invalid_format", f"{name} must be an ISO 8601 date-time, e.g. 2026-01-31T00:00:00Z",
                      location="query")
    if moment.tzinfo is None:
        raise invalid(name, "timezone_required", f"{name} needs a time zone (Z or +hh:mm)", location="query")
    try:
        return to_iso(moment)
    except OverflowError:  # e.g. 0001-01-01T00:00:00+01:00 is before year 1 in UTC
        raise invalid(name, "out_of_range", f"{name} is outside years 1 to 9999 in UTC", location="query") from None
