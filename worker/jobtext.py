"""A job record's JSON text, read and written with its request's part kept.

A record is some 10 KB for a repository of 30 files, nearly all of it the request (``ServeRequest``: the
files, the shape, the context), and every plan reads one record and writes the next: validating and
writing the request each time was most of what a planning job spent in pydantic. A request's text
never changes once submitted, and the same repository is served again and again, so the requests seen
lately are kept by their exact text: a record whose request is one of them is validated without it (the
rest of the record, with the request cut out) and given the kept request, and a record is written from
the rest of it and the request's kept text. What either gives is exactly what ``JobRecord``'s own
``model_validate_json`` and ``model_dump_json`` give; anything else (a request not seen yet, a record
laid out otherwise, one that does not validate) takes the whole way. The layout it cuts at is
``worker.layout``'s (``REQUEST_AT``, ``REQUEST_END``).

Pure: no I/O. Kept per process, at most ``KEPT`` requests.
"""

from __future__ import annotations

from pydantic import ValidationError

from worker.layout import REQUEST_AT as _AT
from worker.layout import REQUEST_END as _END
from worker.records import JobRecord, ServeRequest, read_record

KEPT = 256
"""Requests kept by their text (and texts by their request): past it, all are forgotten and kept anew."""


class _Rest(JobRecord):
    """A job record with its request cut out of the text (``null`` in its place)."""

    request: None = None  # type: ignore[assignment]


_by_text: dict[str, ServeRequest] = {}
_text_of: dict[int, tuple[ServeRequest, str]] = {}


def read_job(raw: bytes | str, key: str) -> JobRecord:
    """The job record ``raw`` holds (``read_record``): ``BadRecord`` when it does not parse."""
    try:
        text = raw.decode() if isinstance(raw, bytes | bytearray) else raw
    except UnicodeDecodeError:
        return read_record(JobRecord, raw, key)
    at = text.find(_AT)
    end = text.find(_END, at) if at >= 0 else -1
    request_text = text[at + len(_AT) : end] if end >= 0 else ""
    request = _by_text.get(request_text) if request_text else None
    if request is not None:
        try:
            rest = _Rest.model_validate_json(text[:at] + _AT + "null" + text[end:])
        except (ValidationError, ValueError):
            pass  # the whole way below, for the error it names
        else:
            values = {name: getattr(rest, name) for name in JobRecord.model_fields}
            values["request"] = request
            return JobRecord.model_construct(_fields_set=rest.model_fields_set | {"request"}, **values)
    rec = read_record(JobRecord, raw, key)
    if request_text:
        _keep(rec.request, request_text)
    return rec


def job_text(rec: JobRecord) -> str:
    """``rec``'s JSON text, as ``rec.to_stored()`` writes it."""
    req = rec.request
    kept = _text_of.get(id(req))
    if kept is None or kept[0] is not req:
        text = rec.to_stored()
        at = text.find(_AT)
        end = text.find(_END, at) if at >= 0 else -1
        if end >= 0:
            _keep(req, text[at + len(_AT) : end])
        return text
    rest = rec.model_dump_json(exclude={"request"})
    end = rest.find(_END)
    return rest[:end] + _AT + kept[1] + rest[end:]


def _keep(request: ServeRequest, text: str) -> None:
    """Keep ``request`` by ``text`` if ``text`` is exactly what the request writes: then the text reads
    back as this request, whatever record it stands in."""
    if text in _by_text or request.model_dump_json() != text:
        return
    if len(_by_text) >= KEPT or len(_text_of) >= KEPT:
        forget()
    _by_text[text] = request
    _text_of[id(request)] = (request, text)


def forget() -> None:
    """Keep no request (and so read and write every record the whole way until some are seen again)."""
    _by_text.clear()
    _text_of.clear()
