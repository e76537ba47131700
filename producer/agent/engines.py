"""The engine a replica runs on a node: its command line and the environment that confines it to its cards."""

from __future__ import annotations

from collections.abc import Sequence

from planner.constants import USABLE_FRACTION
from planner.model import Artifact, Option
from producer import constants as K
from worker.records import JobRecord, Replica, ServeRequest


def gguf_file(artifact: Artifact) -> str:
    """The file llama.cpp is given for an artifact: the file itself, or a split set's first part (it loads
    the rest)."""
    if artifact.shards > 1:
        return f"{artifact.name}-00001-of-{artifact.shards:05d}.gguf"
    return artifact.name


def engine_command(request: ServeRequest, option: Option) -> list[str]:
    """The command line that runs ``option`` for ``request`` on one node.

    llama.cpp: ``llama-server -m FILE -ngl 999 --split-mode layer`` on cards (every layer on them, split by
    layer across the node's cards), ``-ngl 0`` on the CPU. vLLM: ``vllm serve MODEL`` with tensor parallel
    over the node's cards, pipeline parallel over the nodes and the context as ``--max-model-len``. Then
    the settings the plan assumed (the option's ``settings``: ``-c`` over every slot, flash attention,
    batches and cache types for llama.cpp; batched tokens, sequences, the share of a card and the KV cache
    dtype for vLLM), so that the engine runs as it was sized. An option planned before options carried
    their settings gets the context and the plan's share of a card, as then.
    """
    context = str(request.context)
    if option.engine == "llamacpp":
        artifact = next((a for a in request.artifacts if a.name == option.artifact), None)
        model_file = gguf_file(artifact) if artifact is not None else option.artifact
        command = ["llama-server", "-m", model_file, *(option.settings or ("-c", context))]
        if option.cpu:
            return [*command, "-ngl", "0"]
        return [*command, "-ngl", str(K.LLAMACPP_ALL_LAYERS), "--split-mode", "layer"]
    return [
        "vllm",
        "serve",
        request.model,
        "--tensor-parallel-size",
        str(option.gpus_per_node),
        "--pipeline-parallel-size",
        str(max(option.nodes, 1)),
        "--max-model-len",
        context,
        *(option.settings or ("--gpu-memory-utilization", str(USABLE_FRACTION))),
    ]


def engine_env(cards: Sequence[int]) -> dict[str, str]:
    """The environment that confines an engine to ``cards`` (none: no card at all). CUDA numbers cards
    fastest first unless told PCI bus order, which is the order NVML and nvidia-smi index them in."""
    return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(str(c) for c in cards)}


def replica_of(job: JobRecord, hold_id: str) -> Replica | None:
    """The replica of ``job`` whose reservation is ``hold_id``."""
    return next((rep for rep in job.replicas if any(r.hold_id == hold_id for r in rep.placement)), None)
