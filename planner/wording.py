"""pydantic's complaints in the words the rest of modelplan's messages use: what is allowed, not what the
validator expected ("must be at least 0", not "Input should be greater than or equal to 0")."""

from __future__ import annotations

from typing import Any

from pydantic_core import ErrorDetails

_BOUNDS = {
    "greater_than_equal": ("ge", "at least"),
    "greater_than": ("gt", "more than"),
    "less_than_equal": ("le", "at most"),
    "less_than": ("lt", "less than"),
}

_KINDS = {
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "string_type": "must be text",
    "bool_type": "must be true or false",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "dict_type": "must be an object",
    "model_type": "must be an object",
}


def plain(err: ErrorDetails) -> str:
    """One pydantic error's message, plain: bounds and types said as what is allowed."""
    kind = err["type"]
    ctx: dict[str, Any] = dict(err.get("ctx") or {})
    if kind in _BOUNDS:
        name, words = _BOUNDS[kind]
        return f"must be {words} {ctx[name]}"
    if kind in ("string_too_short", "too_short"):
        n = ctx.get("min_length")
        unit = "character" if kind == "string_too_short" else "item"
        return f"must have at least {n} {unit}{'s' if n != 1 else ''}"
    if kind in ("string_too_long", "too_long"):
        n = ctx.get("max_length")
        unit = "character" if kind == "string_too_long" else "item"
        return f"must have at most {n} {unit}{'s' if n != 1 else ''}"
    if kind in _KINDS:
        return _KINDS[kind]
    return err["msg"].removeprefix("Value error, ")
