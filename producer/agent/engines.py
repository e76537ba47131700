"""The engine a replica runs on a node: its whole command line (the model as the engine loads it, every
parallel and context flag, the settings the plan sized it for, and a node's part of a replica over several
nodes), and the environment that confines it to its cards.

Each flag is one the engine's own command line takes:

- vLLM (``vllm serve``; vllm-project/vllm): ``--tensor-parallel-size``,
  ``--pipeline-parallel-size``, ``--max-model-len``, ``--served-model-name`` (``vllm/engine/arg_utils.py``),
  and for a replica over several nodes ``--distributed-executor-backend mp --nnodes N --node-rank R
  --master-addr HEAD --master-port PORT``, ``--headless`` on every node but the head
  (https://github.com/vllm-project/vllm/blob/main/docs/serving/parallelism_scaling.md, "Running vLLM with
  MultiProcessing"; ``vllm/config/parallel.py``:
  ``master_addr``, ``master_port`` (29501 by default), ``node_rank`` and ``nnodes`` "for multi-node
  distributed inference when distributed_executor_backend is mp"): no Ray cluster is needed.
- llama.cpp (``llama-server``; ggml-org/llama.cpp ``tools/server/README.md``): ``-m FILE`` or ``--hf-repo
  ORG/NAME --hf-file FILE``, ``-ngl`` (layers on the cards), ``--split-mode layer`` with ``--tensor-split
  1,1,...`` (an equal share of the layers on each card, as the plan counts them), ``--alias`` (the model's
  name in the API), and the settings (``-c``, ``-np``, ``-fa``, ``-b``, ``-ub``, ``-ctk``, ``-ctv``). A GGUF is
  planned on one node only, so llama.cpp's RPC backend is not used.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from planner.constants import USABLE_FRACTION
from planner.model import Artifact, Option
from producer import constants as K
from worker.records import JobRecord, Replica, Reservation, ServeRequest

HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
"""A Hub repository id (``org/name``), as ``producer.hub.REPO_ID_PATTERN`` has it."""

MODELS_DIR_SHOWN = "MODELS_DIR"
"""Where a command shown away from the nodes puts the agent's ``--models-dir`` when the request names no
place for the model: the node's own folder is known only there."""

HEAD_SHOWN = "HEAD_NODE"
"""Where a command shown for an option not placed yet puts the address of the replica's first node."""

MASTER_PORT_BASE = 29501
"""vLLM's own default ``--master-port`` (``vllm/config/parallel.py``): where a replica's ports start."""

MASTER_PORT_SPAN = 1000
"""How many ports past ``MASTER_PORT_BASE`` a replica's port is drawn from (by its hold id), so that two
replicas whose heads share a node do not meet on one port."""


@dataclass(frozen=True, slots=True)
class NodePart:
    """One node's part of a replica over several nodes: its rank (0 for the head, which serves the API),
    how many nodes, the head's address, and the port the nodes meet on."""

    rank: int
    nodes: int
    head: str
    port: int = MASTER_PORT_BASE


def gguf_file(artifact: Artifact) -> str:
    """The file llama.cpp is given for an artifact: the file itself, or a split set's first part (it loads
    the rest)."""
    if artifact.shards > 1:
        return f"{artifact.name}-00001-of-{artifact.shards:05d}.gguf"
    return artifact.name


def model_source(request: ServeRequest, models_dir: str | None = None) -> str:
    """Where the engine loads the model from: the request's ``model_path`` (a Hub id or an absolute path on
    the nodes), else its ``model`` where that is a Hub id, else the folder of that name under the agent's
    ``models_dir`` (``MODELS_DIR`` where none is given: a command shown away from the nodes)."""
    return _located(request, models_dir)[0]


def _located(request: ServeRequest, models_dir: str | None) -> tuple[str, bool]:
    """``model_source``, and whether it is a Hub id."""
    if request.model_path:
        return request.model_path, not request.model_path.startswith("/")
    if HUB_ID.fullmatch(request.model) and ".." not in request.model:
        return request.model, True
    return posixpath.join(models_dir or MODELS_DIR_SHOWN, request.model), False


def _gguf_model(request: ServeRequest, option: Option, models_dir: str | None) -> list[str]:
    artifact = next((a for a in request.artifacts if a.name == option.artifact), None)
    file = gguf_file(artifact) if artifact is not None else option.artifact
    source, from_hub = _located(request, models_dir)
    if from_hub:  # llama-server downloads the one file from the Hub
        return ["--hf-repo", source, "--hf-file", file]
    if source.endswith(".gguf"):  # the request names the file itself
        return ["-m", source]
    return ["-m", posixpath.join(source, file)]


def engine_command(
    request: ServeRequest, option: Option, *, models_dir: str | None = None, part: NodePart | None = None
) -> list[str]:
    """The command line that runs ``option`` for ``request`` on one node; ``part`` is the node's part of a
    replica over several nodes (none: the head's, with the head shown as ``HEAD_NODE``).

    llama.cpp: ``llama-server`` with the model file, the settings the plan assumed (``-c`` over every slot,
    flash attention, batches and cache types: the option's ``settings``), ``-ngl 0`` on the CPU, else every
    layer on the cards (``-ngl 999``) split by layer, an equal share on each (``--tensor-split 1,1``), and
    the model's name as its alias. vLLM: ``vllm serve`` with the model, its name as served, tensor parallel
    over the node's cards, pipeline parallel over the nodes, the context as ``--max-model-len``, then the
    settings (batched tokens, sequences, the share of a card, the KV cache dtype), then a node's part.
    Quantised original weights need no flag: vLLM reads the method from the model's config. An option
    planned before options carried their settings gets the context and the plan's share of a card, as then.
    """
    context = str(request.context)
    if option.engine == "llamacpp":
        command = ["llama-server", *_gguf_model(request, option, models_dir), "--alias", request.model]
        command += option.settings or ("-c", context)
        if option.cpu:
            return [*command, "-ngl", "0"]
        command += ["-ngl", str(K.LLAMACPP_ALL_LAYERS), "--split-mode", "layer"]
        # without it llama.cpp splits by each card's free memory at load (src/llama-model.cpp, "default split,
        # by free memory"), not evenly as the plan counts
        if option.gpus_per_node > 1:
            command += ["--tensor-split", ",".join("1" for _ in range(option.gpus_per_node))]
        return command
    nodes = max(option.nodes, 1)
    command = [
        "vllm",
        "serve",
        model_source(request, models_dir),
        "--served-model-name",
        request.model,
        "--tensor-parallel-size",
        str(option.gpus_per_node),
        "--pipeline-parallel-size",
        str(nodes),
        "--max-model-len",
        context,
        *(option.settings or ("--gpu-memory-utilization", str(USABLE_FRACTION))),
    ]
    if nodes > 1:
        part = part or NodePart(0, nodes, HEAD_SHOWN)
        command += [
            "--distributed-executor-backend", "mp", "--nnodes", str(part.nodes), "--node-rank", str(part.rank),
            "--master-addr", part.head, "--master-port", str(part.port),
        ]  # fmt: skip
        if part.rank > 0:  # only the head serves the API; the others run their stage of the pipeline
            command.append("--headless")
    return command


def master_port(hold_id: str) -> int:
    """The port a replica's nodes meet on: drawn from its hold id, which every node of it shares."""
    return MASTER_PORT_BASE + zlib.crc32(hold_id.encode()) % MASTER_PORT_SPAN


def node_part(replica: Replica, node_id: str) -> NodePart | None:
    """``node_id``'s part of ``replica`` where it spans several nodes: the order of its placement is the
    order of the pipeline's stages, its first node the head, whose node id the others reach it by (the
    agent's default node id is the host name). None for a replica on one node, or not on ``node_id``."""
    nodes = [r.node_id for r in replica.placement]
    if len(nodes) < 2 or node_id not in nodes:
        return None
    return NodePart(nodes.index(node_id), len(nodes), nodes[0], master_port(replica.placement[0].hold_id))


def node_command(job: JobRecord, reservation: Reservation, models_dir: str | None = None) -> list[str]:
    """The command line this node runs for its hold ``reservation`` of ``job``: the replica's option, with
    this node's part where the replica spans several nodes. ``ValueError`` where the hold is no replica's."""
    replica = replica_of(job, reservation.hold_id)
    if replica is None or replica.option is None:
        raise ValueError(f"hold {reservation.hold_id!r} is not a replica of job {job.job_id!r} with an option")
    part = node_part(replica, reservation.node_id)
    return engine_command(job.request, replica.option, models_dir=models_dir, part=part)


def replica_commands(job: JobRecord, replica: Replica) -> list[tuple[str, list[str]]]:
    """Each node of a placed replica with the command line it runs, head first (as shown by ``job``)."""
    if replica.option is None:
        return []
    return [
        (r.node_id, engine_command(job.request, replica.option, part=node_part(replica, r.node_id)))
        for r in replica.placement
    ]


def shown(command: Sequence[str]) -> str:
    """A command line as a shell takes it, each argument quoted where it needs to be."""
    return shlex.join(command)


def engine_env(cards: Sequence[int]) -> dict[str, str]:
    """The environment that confines an engine to ``cards`` (none: no card at all). CUDA numbers cards
    fastest first unless told PCI bus order, which is the order NVML and nvidia-smi index them in."""
    return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(str(c) for c in cards)}


def replica_of(job: JobRecord, hold_id: str) -> Replica | None:
    """The replica of ``job`` whose reservation is ``hold_id``."""
    return next((rep for rep in job.replicas if any(r.hold_id == hold_id for r in rep.placement)), None)
