"""What an engine's log says of why it did not start: its own out-of-memory lines, quoted from the engines'
issue trackers (``producer.agent.engine_log`` names where), and its last lines."""

from __future__ import annotations

import pytest

from producer.agent.engine_log import last_lines, out_of_memory

VLLM_CACHE = (
    "ERROR 11-18 18:07:28 engine.py:366] ValueError: No available memory for the cache blocks. Try increasing "
    "`gpu_memory_utilization` when initializing the engine."
)
VLLM_TORCH = (
    "(VllmWorkerProcess pid=195295) ERROR 03-02 19:49:43 [multiproc_worker_utils.py:242] torch.OutOfMemoryError: "
    "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 2 has a total capacity of 14.62 GiB of which 3.31 MiB "
    "is free."
)
LLAMA_WEIGHTS = [
    "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 144817.04 MiB on device 0: cudaMalloc failed: "
    "out of memory",
    "alloc_tensor_range: failed to allocate CUDA0 buffer of size 151851674624",
    "llama_model_load: error loading model: unable to allocate CUDA0 buffer",
]
LLAMA_CONTEXT = [
    "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 144.00 MiB on device 4: cudaMalloc failed: out of memory",
    "ggml_gallocr_reserve_n: failed to allocate CUDA4 buffer of size 150995968",
    "llama_new_context_with_model: failed to allocate compute buffers",
]


@pytest.mark.parametrize(
    ("engine", "lines", "said"),
    [
        ("vllm", ["INFO loading", VLLM_CACHE, "Traceback tail"], VLLM_CACHE),
        ("vllm", [VLLM_TORCH], VLLM_TORCH),
        ("llamacpp", ["load_tensors: loading model tensors", *LLAMA_WEIGHTS], LLAMA_WEIGHTS[-1]),
        ("llamacpp", LLAMA_CONTEXT, LLAMA_CONTEXT[-1]),
    ],
)
def test_each_engines_own_out_of_memory_lines_are_found(engine: str, lines: list[str], said: str) -> None:
    assert out_of_memory(engine, "\n".join(lines) + "\n") == said


def test_other_failures_are_not_out_of_memory() -> None:
    text = "error: unknown argument: --bogus\nggml_cuda_host_malloc: failed to allocate 1900,00 MiB of pinned memory\n"
    assert out_of_memory("llamacpp", text) == ""
    assert out_of_memory("vllm", "ValueError: The model's max seq len is larger than the maximum\n") == ""
    assert last_lines("a\n\n b \nc\nd\n", 3) == ["b", "c", "d"]
