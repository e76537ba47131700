"""A small llama-architecture GGUF with random weights, for starting a real llama-server without a download.

The weights are noise (the model says nothing useful); what matters is that llama.cpp loads it as it loads
a real Llama (the same tensors, shapes and metadata keys) and that its size and shape are known, so the
planner's estimate of what the server holds can be held against what it really holds.

The tokenizer is a SentencePiece-style (``llama``) vocabulary: unknown, begin and end, the 256 byte tokens
(so any text can be tokenized, by bytes), printable ASCII as single-character pieces, and unused pieces up
to the vocabulary size asked for (the size sets the output layer and the logits, as in a real model).

    python -m bench.tinygguf OUT.gguf [--layers 8] [--width 1024] [--heads 16] [--kv-heads 4]
        [--ffn 2816] [--vocab 32000] [--type f16|q8_0] [--seed 0]

Needs the ``gguf`` package (``pip install -e '.[engine]'``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
import numpy.typing as npt

SPECIALS = ("<unk>", "<s>", "</s>")
"""Ids 0, 1 and 2: llama.cpp's defaults for a ``llama`` vocabulary's unknown, begin and end tokens."""


@dataclass(frozen=True, slots=True)
class TinyShape:
    layers: int = 8
    width: int = 1024
    heads: int = 16
    kv_heads: int = 4
    ffn: int = 2816
    vocab: int = 32000
    context: int = 32768
    """The context it was 'trained' for (``llama.context_length``): the most a server may be started with."""
    type: str = "f16"
    """The big matrices' type: ``f16`` or ``q8_0`` (norms stay f32, as converters leave them)."""

    def check(self) -> None:
        if self.type not in ("f16", "q8_0"):
            raise ValueError(f"--type {self.type!r}: give f16 or q8_0")
        if min(self.layers, self.width, self.heads, self.kv_heads, self.ffn) < 1:
            raise ValueError("layers, width, heads, kv heads and ffn must each be at least 1")
        if self.width % self.heads or self.heads % self.kv_heads:
            raise ValueError(f"width {self.width} over {self.heads} heads over {self.kv_heads} kv heads: not whole")
        if self.type == "q8_0" and (self.width % 32 or self.ffn % 32):
            raise ValueError("q8_0 needs the width and the ffn size in multiples of 32 (its block)")
        if self.vocab < len(SPECIALS) + 256:
            raise ValueError(f"--vocab {self.vocab}: at least {len(SPECIALS) + 256} (the specials and 256 bytes)")

    @property
    def head_dim(self) -> int:
        return self.width // self.heads


def vocabulary(size: int) -> tuple[list[str], list[float], list[int]]:
    """Pieces, scores and token types of a ``llama`` vocabulary of ``size`` tokens."""
    T = gguf.TokenType
    pieces = list(SPECIALS)
    types = [int(T.UNKNOWN), int(T.CONTROL), int(T.CONTROL)]
    pieces += [f"<0x{b:02X}>" for b in range(256)]
    types += [int(T.BYTE)] * 256
    # single characters, the space as SentencePiece writes it first
    for ch in ["▁", *(chr(c) for c in range(33, 127))]:
        if len(pieces) < size:
            pieces.append(ch)
            types.append(int(T.NORMAL))
    while len(pieces) < size:
        pieces.append(f"<unused{len(pieces)}>")
        types.append(int(T.UNUSED))
    scores = [0.0] * len(SPECIALS) + [-1000.0] * 256 + [-float(i) for i in range(size - len(SPECIALS) - 256)]
    return pieces, scores, types


def tensors(shape: TinyShape, rng: np.random.Generator) -> Iterator[tuple[str, npt.NDArray[np.float32]]]:
    """Each tensor's name and values, as numpy arrays shaped (rows, columns): llama.cpp's (columns, rows)."""

    def noise(*dims: int) -> npt.NDArray[np.float32]:
        return (rng.standard_normal(dims, dtype=np.float32) * 0.02).astype(np.float32)

    ones = np.ones(shape.width, dtype=np.float32)
    kv_width = shape.kv_heads * shape.head_dim
    yield "token_embd.weight", noise(shape.vocab, shape.width)
    for i in range(shape.layers):
        blk = f"blk.{i}"
        yield f"{blk}.attn_norm.weight", ones
        yield f"{blk}.attn_q.weight", noise(shape.width, shape.width)
        yield f"{blk}.attn_k.weight", noise(kv_width, shape.width)
        yield f"{blk}.attn_v.weight", noise(kv_width, shape.width)
        yield f"{blk}.attn_output.weight", noise(shape.width, shape.width)
        yield f"{blk}.ffn_norm.weight", ones
        yield f"{blk}.ffn_gate.weight", noise(shape.ffn, shape.width)
        yield f"{blk}.ffn_up.weight", noise(shape.ffn, shape.width)
        yield f"{blk}.ffn_down.weight", noise(shape.width, shape.ffn)
    yield "output_norm.weight", ones
    yield "output.weight", noise(shape.vocab, shape.width)


def write(path: Path, shape: TinyShape, seed: int = 0) -> int:
    """Writes the model to ``path``; returns its size in bytes."""
    shape.check()
    arch = "llama"
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny-llama-{shape.layers}x{shape.width}-{shape.type}")
    w.add_context_length(shape.context)
    w.add_embedding_length(shape.width)
    w.add_block_count(shape.layers)
    w.add_feed_forward_length(shape.ffn)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.kv_heads)
    w.add_rope_dimension_count(shape.head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(shape.vocab)
    ftype = gguf.LlamaFileType.MOSTLY_F16 if shape.type == "f16" else gguf.LlamaFileType.MOSTLY_Q8_0
    w.add_file_type(int(ftype))
    pieces, scores, types = vocabulary(shape.vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(pieces)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    quant = gguf.GGMLQuantizationType.Q8_0 if shape.type == "q8_0" else gguf.GGMLQuantizationType.F16
    for name, values in tensors(shape, np.random.default_rng(seed)):
        if values.ndim == 1:
            w.add_tensor(name, values)
        elif quant == gguf.GGMLQuantizationType.F16:
            w.add_tensor(name, values.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(values, quant), raw_dtype=quant)  # its shape: bytes a row
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path.stat().st_size


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.tinygguf", description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    d = TinyShape()
    for field, default in (
        ("layers", d.layers),
        ("width", d.width),
        ("heads", d.heads),
        ("kv-heads", d.kv_heads),
        ("ffn", d.ffn),
        ("vocab", d.vocab),
        ("context", d.context),
    ):
        p.add_argument(f"--{field}", type=int, default=default)
    p.add_argument("--type", default=d.type, choices=("f16", "q8_0"))
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    shape = TinyShape(a.layers, a.width, a.heads, a.kv_heads, a.ffn, a.vocab, a.context, a.type)
    try:
        size = write(a.out, shape, a.seed)
    except ValueError as e:
        print(f"tinygguf: {e}", file=sys.stderr)
        return 2
    print(f"wrote {a.out}: {size} bytes ({shape})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
