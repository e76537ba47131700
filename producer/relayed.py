"""What a relay's client keeps of the heartbeats it forwards, so that a node's next heartbeat that differs
from its last only in its ``seq`` (a refresh: most of them) is not validated again.

A node's agent sends the same text every few seconds but for the seq. The text around the seq is the key:
a text equal to one validated before, but for the seq's digits, validates to the same heartbeat with this
seq, and its stored record is the one made then with this seq in place of that one. That holds only where
the seq is plainly the one ``seq`` key's value, so a text is kept, and found, only when it has no escape
at all (no ``\\``: no key can be spelled otherwise), one ``"seq"``, and that seq is a whole number in
range written plainly (no sign, no leading zero, no fraction or exponent). Any other text is validated in
full, each time.
"""

from __future__ import annotations

import re

from worker.reports import SEQ_MAX, parse_heartbeat

SEQ = re.compile(r'"seq"\s*:\s*(0|[1-9][0-9]{0,15})\s*[,}]')
"""The seq where it can stand for the text's: the ``seq`` key's value, a plain whole number."""

LIMIT = 1 << 17
"""Texts kept at most (a relay's nodes, with room): past it, the memory starts again, empty."""


Stored = tuple[str, str, str]
"""A heartbeat as ``Client.heartbeats`` stores it: its node's id, its boot, and its stored record's JSON."""


class Relayed:
    """The heartbeats a client validated from text, by their text without the seq's digits: each one's node
    id and boot, and its stored record's JSON up to the seq (``reports.stored_json``'s, cut there)."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[str, str, str]] = {}

    def stored(self, text: str, tail: str) -> Stored:
        """The heartbeat ``text`` holds as stored with ``tail`` (``records.stored_tail``), or
        ``InvalidInput`` naming the field when it holds none: from what was kept of the node's last text
        where only the seq differs, else validated (and kept)."""
        found = _seq_of(text)
        if found is None:
            hb = parse_heartbeat(text)
            return hb.node_id, hb.boot_id, hb.model_dump_json()[:-1] + tail
        start, end, seq = found
        key = text[:start] + text[end:]
        known = self._known.get(key)
        if known is not None:
            node_id, boot_id, before = known
            return node_id, boot_id, before + str(seq) + tail
        hb = parse_heartbeat(text)
        if len(self._known) >= LIMIT:
            self._known.clear()
        record = hb.model_dump_json()[:-1]
        self._known[key] = (hb.node_id, hb.boot_id, record[: -len(str(hb.seq))])
        return hb.node_id, hb.boot_id, record + tail

    def __len__(self) -> int:
        return len(self._known)


def _seq_of(text: str) -> tuple[int, int, int] | None:
    """Where the seq's digits start and end in ``text``, and their value, if the text can be known by the
    rest of it (see the module's docstring)."""
    if "\\" in text or text.count('"seq"') != 1:
        return None
    m = SEQ.search(text)
    if m is None:
        return None
    seq = int(m.group(1))
    if seq > SEQ_MAX:
        return None
    return m.start(1), m.end(1), seq
