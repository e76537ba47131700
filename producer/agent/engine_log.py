"""What an engine says of itself in its start-up log: its release and the KV cache it allocated.

The log is one run of the engine (the supervisor writes a log per start). Every figure here is one the
engine printed; nothing is derived from the model.

- llama.cpp prints one ``<device> KV buffer size = N MiB`` line per device and cache when it makes its
  context (``llama_kv_cache_init:`` before b4xxx, ``llama_kv_cache_unified:`` then ``llama_kv_cache:``);
  ``CUDA0`` is the first card the engine was given, ``CPU`` and ``CUDA_Host`` are host memory. A model
  with sliding-window layers has two caches in one context (both count). Its release is the build number
  of ``build: 6500 (abcdef12)``, ``main: build = 4343 (...)``, ``version: 4462 (...)`` or, from 2026
  builds, ``common_init: build 6500 (...)`` and ``--version``'s ``version: 0.5.0 (build 6500, commit
  ...)``, named as its release tag (``b6500``).
- vLLM's workers each print what they may give their cache: ``Available KV cache memory: 19.24 GiB`` (V1;
  V0: ``the rest of the memory reserved for KV Cache is 17.24GiB``, ``available_kv_cache_memory
  53.29GiB``, ``kv_cache_size=3.81GiB``), one line per rank with tensor parallelism, in GiB of 2^30 bytes
  rounded to 0.01. The engine sizes every rank's cache to the smallest, in whole blocks (so at most one
  block a layer under it), and that is each card's KV part. Its release: ``vLLM API server version
  0.11.0``, the start-up banner's ``version 0.19.1``, or ``Initializing a V1 LLM engine (v0.11.0)``.
"""

from __future__ import annotations

import re
from decimal import Decimal

from worker.footprints import VERSION_PATTERN

MIB = 1 << 20
GIB = 1 << 30

ENGINES = ("vllm", "llamacpp")

_LLAMA_KV = re.compile(r"\b(\w+) KV buffer size\s*=\s*([0-9]+(?:\.[0-9]+)?) MiB")
# each context prints its n_ctx before its caches: a context made again (a trial) replaces the earlier
_LLAMA_CONTEXT = re.compile(r"\b(?:llama_new_context_with_model|llama_init_from_model|llama_context):\s+n_ctx\s+=")
_LLAMA_CARD = re.compile(r"(?:CUDA|ROCm|Vulkan|SYCL|MUSA|CANN)(\d+)")
_LLAMA_HOST = re.compile(r"CPU|\w+_Host")
_LLAMA_VERSION = re.compile(r"(?:\bbuild(?::| =)?|^version:) (\d+)(?: \(|, commit )", re.MULTILINE)

_VLLM_KV = re.compile(
    r"(?:Available KV cache memory:|reserved for KV Cache is|available_kv_cache_memory|kv_cache_size=)"
    r"\s*([0-9]+(?:\.[0-9]+)?)\s*GiB"
)
_VLLM_VERSION = re.compile(
    r"vLLM API server version (\S+)"
    r"|\u2588\s+version (\S+)"  # the banner: ... ▀▄▀ █  version 0.19.1
    r"|Initializing an? (?:V1 )?LLM engine \(v([^\s)]+)\)"
)


def _engine(engine: str) -> str:
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r}: not one of {', '.join(ENGINES)}")
    return engine


def _version(found: str) -> str:
    return found if re.fullmatch(VERSION_PATTERN, found) else ""


def engine_version(engine: str, log_text: str) -> str:
    """The release the engine printed (the last it printed); "" when it has not said, or says none."""
    if _engine(engine) == "llamacpp":
        numbers = _LLAMA_VERSION.findall(log_text)
        # a build made outside git prints build 0 (unknown): no release to name
        return f"b{numbers[-1]}" if numbers and int(numbers[-1]) > 0 else ""
    found = [next(g for g in m.groups() if g) for m in _VLLM_VERSION.finditer(log_text)]
    return _version(found[-1]) if found else ""


def llamacpp_kv(log_text: str) -> dict[str, int]:
    """Bytes of KV cache per llama.cpp device (``CUDA0``, ``CPU``...) in the last context it made."""
    kv: dict[str, int] = {}
    for line in log_text.splitlines():
        if _LLAMA_CONTEXT.search(line):
            kv = {}
        m = _LLAMA_KV.search(line)
        if m:
            kv[m.group(1)] = kv.get(m.group(1), 0) + int(Decimal(m.group(2)) * MIB)
    return kv


def vllm_kv(log_text: str) -> list[int]:
    """Bytes each vLLM rank said it may give its KV cache, one per line printed."""
    return [int(Decimal(m.group(1)) * GIB) for m in _VLLM_KV.finditer(log_text)]


def kv_per_card(engine: str, log_text: str, cards: int) -> int:
    """The KV cache on each of the hold's ``cards`` cards, as the engine printed it: the smallest over
    them (llama.cpp splits layers unevenly; vLLM's ranks are sized alike), so that a card's figure less
    it is never less than what that card holds besides its cache. 0 when it has not said, on a card it
    printed nothing for, and on a CPU hold."""
    if cards <= 0:
        return 0
    if _engine(engine) == "vllm":
        ranks = vllm_kv(log_text)
        return min(ranks) if ranks else 0
    per_card: dict[int, int] = {}
    for device, size in llamacpp_kv(log_text).items():
        m = _LLAMA_CARD.fullmatch(device)
        if m:
            per_card[int(m.group(1))] = per_card.get(int(m.group(1)), 0) + size
    return min(per_card.get(i, 0) for i in range(cards))


def ram_kv(engine: str, log_text: str) -> int:
    """The KV cache llama.cpp keeps in host memory (``CPU`` and ``*_Host`` buffers); 0 for vLLM, whose
    cache is on its cards."""
    if _engine(engine) == "vllm":
        return 0
    return sum(size for device, size in llamacpp_kv(log_text).items() if _LLAMA_HOST.fullmatch(device))


# Out of memory as an engine starts, as each engine prints it:
# - vLLM, the cache sized to nothing: ``ValueError: No available memory for the cache blocks. Try increasing
#   `gpu_memory_utilization` when initializing the engine.`` (vllm-project/vllm issues #10439 (V0,
#   vllm/worker/worker.py raise_if_cache_size_invalid) and #27508 (V1, vllm/v1/core/kv_cache_utils.py
#   check_enough_kv_cache_memory));
# - vLLM, PyTorch's allocator: ``torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 224.00 MiB.
#   GPU 0 has a total capacity of 11.53 GiB of which 187.75 MiB is free. ...`` (vllm-project/vllm #12030,
#   #14095; ``torch.cuda.OutOfMemoryError`` in older PyTorch, #2140);
# - llama.cpp: ``ggml_backend_cuda_buffer_type_alloc_buffer: allocating 144817.04 MiB on device 0: cudaMalloc
#   failed: out of memory``, ``alloc_tensor_range: failed to allocate CUDA0 buffer of size 151851674624``,
#   ``llama_model_load: error loading model: unable to allocate CUDA0 buffer`` (ggml-org/llama.cpp #20431),
#   and for the context ``ggml_gallocr_reserve_n: failed to allocate CUDA4 buffer of size 150995968``,
#   ``llama_new_context_with_model: failed to allocate compute buffers`` (ollama/ollama #6860).
_OUT_OF_MEMORY = {
    "vllm": re.compile(
        r"No available memory for the cache blocks|(?:torch\.(?:cuda\.)?)?OutOfMemoryError: CUDA out of memory"
    ),
    "llamacpp": re.compile(
        r"cudaMalloc failed: out of memory|(?:failed|unable) to allocate \w+ buffer|failed to allocate compute buffers"
    ),
}


def out_of_memory(engine: str, log_text: str) -> str:
    """The last line of ``log_text`` in which the engine says it ran out of memory (stripped), else ""."""
    pattern = _OUT_OF_MEMORY[_engine(engine)]
    found = [line.strip() for line in log_text.splitlines() if pattern.search(line)]
    return found[-1] if found else ""


def last_lines(log_text: str, count: int = 3) -> list[str]:
    """The last ``count`` lines of ``log_text`` that say something (blank lines left out), stripped."""
    said = [line.strip() for line in log_text.splitlines() if line.strip()]
    return said[-count:]
