"""Where an engine the ``run`` hook starts listens, and how it is asked about itself: a free port, the
address an advertised name resolves to (``--advertise``), its ``/health`` and the model its ``/v1/models``
names, and what of its words a heartbeat may carry."""

from __future__ import annotations

import json
import re
import socket
import urllib.error
import urllib.request

from planner.errors import InvalidInput

HOST = "127.0.0.1"
"""Where engines listen unless the agent advertises another address: reached from the node alone."""

HEALTH_TIMEOUT_S = 1.0
"""How long one ask of an engine may take: a tick asks every engine that is not ready yet."""


def free_port(host: str = HOST) -> int:
    """A TCP port nothing listens on now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


ADVERTISE_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}|\[[0-9A-Fa-f:.]{2,45}\]")
"""What ``--advertise`` may name: a host name, an IPv4 address, or an IPv6 one in brackets (the host part of
``worker.conditions.ENDPOINT_PATTERN``)."""


def bind_address(advertise: str) -> str:
    """The address engines listen on for an agent that advertises ``advertise``: that name's own address
    (an address stays itself), so that an engine answers only there, never on every interface.
    ``InvalidInput`` naming ``--advertise`` where it is no host, or names none this machine can resolve."""
    if not ADVERTISE_HOST.fullmatch(advertise):
        raise InvalidInput(
            "arguments", "--advertise", f"{advertise[:80]!r}: a host name or address (IPv6 in brackets) is wanted"
        )
    host = advertise.strip("[]")
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        raise InvalidInput("arguments", "--advertise", f"{advertise!r} does not resolve here ({e})") from e
    return str(found[0][4][0])


def healthy(port: int, timeout: float = HEALTH_TIMEOUT_S, host: str = HOST) -> bool:
    """Whether ``GET /health`` on the engine's port answers 200 (llama-server answers 503 while loading)."""
    try:
        with urllib.request.urlopen(f"http://{url_host(host)}:{port}/health", timeout=timeout) as answer:
            return int(answer.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def served_model(port: int, host: str = HOST, api_key: str = "", timeout: float = HEALTH_TIMEOUT_S) -> str:
    """The model name ``GET /v1/models`` says the engine serves (the first), or "" when it does not say.
    vLLM and llama-server both answer it (OpenAI's list of models: ``{"data": [{"id": ...}]}``)."""
    request = urllib.request.Request(f"http://{url_host(host)}:{port}/v1/models")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            data = json.loads(answer.read(1 << 20))
        found = data["data"][0]["id"]
    except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError):
        return ""
    return said_text(found, 200) if isinstance(found, str) else ""


def said_text(text: str, most: int) -> str:
    """``text`` as a heartbeat may carry it: no quote, backslash or control character, at most ``most``."""
    kept = "".join(c if c.isprintable() and c not in '"\\' else " " for c in text).strip()
    return kept[:most]
