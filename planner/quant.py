"""Reading labels: the quantisation in a file's name, the card size in a class label."""

from __future__ import annotations

import re
from functools import lru_cache

from planner.quantconfig import original_bits

QUANT_BITS: dict[str, float] = {
    "F32": 32,
    "F16": 16,
    "BF16": 16,
    "FP16": 16,
    "Q8_0": 8.5,
    "Q6_K": 6.6,
    "Q5_K_M": 5.7,
    "Q5_K_S": 5.5,
    "Q5_0": 5.5,
    "Q5_1": 6,
    "Q4_K_M": 4.8,
    "Q4_K_S": 4.6,
    "Q4_0": 4.5,
    "Q4_1": 5,
    "IQ4_XS": 4.3,
    "IQ4_NL": 4.5,
    "Q3_K_L": 4.3,
    "Q3_K_M": 3.9,
    "Q3_K_S": 3.5,
    "IQ3_M": 3.7,
    "IQ3_XS": 3.3,
    "IQ3_XXS": 3.1,
    "Q2_K": 3.0,
    "IQ2_M": 2.7,
    "IQ2_XS": 2.3,
    "IQ2_XXS": 2.1,
    "IQ1_M": 1.8,
    "IQ1_S": 1.6,
}
"""Roughly what each quantisation spends a weight, for when the parameter count is not known to work it
out from the file's size."""

# The seed's pattern. Alternatives are tried left to right at each position, as Go's RE2 does for
# leftmost-first matching; re.ASCII keeps \d and case folding to ASCII, as RE2's are.
_QUANT = re.compile(r"(IQ\d_[A-Z]+|Q\d_K_[SML]|Q\d_K|Q\d_\d|Q\d|BF16|F16|F32|FP16)", re.IGNORECASE | re.ASCII)
_CLASS_SIZE = re.compile(r"\+?(\d+)g(?:b|ib|ig)?", re.ASCII | re.IGNORECASE)


def quant_of(name: str) -> str:
    """The quantisation in a file name (its last match, upper case), or ``""``."""
    found = _QUANT.findall(name)
    return found[-1].upper() if found else ""


def bits_of(quant: str) -> float:
    """Bits per weight of a quantisation by the table (GGUF's, then an original's: ``fp8``, ``awq-int4``);
    0 when it is in neither."""
    return QUANT_BITS.get(quant.upper(), 0.0) or original_bits(quant.lower())


@lru_cache(maxsize=4096)  # a fleet has a few labels, and every heartbeat's validation reads one
def mem_from_class(gpu_class: str) -> int:
    """The card size in GiB in a class label such as ``h100-80g``: the part after the last ``-``, digits
    followed by ``g`` (the seed's ``MemFromClass`` reads ``%dg``), which may go on as ``gb``, ``gib`` or
    ``gig``, in either case: ``80g``, ``80gb``, ``80GB``, ``24gig``. 0 when the label carries none. A size
    past any card is returned as it is, for the caller to refuse."""
    _, dash, tail = gpu_class.rpartition("-")
    if not dash:
        return 0
    m = _CLASS_SIZE.fullmatch(tail)
    return int(m.group(1)) if m else 0
