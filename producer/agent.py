"""The node agent: reads the node's cards and host memory, publishes its heartbeat at an interval, and
hands the replicas placed on the node to an engine starter.

Three layers, so that each can be tested on its own:

- pure functions: NVML readings, nvidia-smi CSV or ``/proc/meminfo`` in, cards, host memory, a class
  label, a heartbeat or an engine's command line out;
- readers (``SystemReader``) that call NVML (the ``nvidia-ml-py`` package, imported only when used), else
  nvidia-smi, and read ``/proc``; tests give their own;
- ``Agent``: one ``tick()`` reads, hands the replicas placed on the node (their holds, by hold id
  ``{job_id}:{replica}:{version}``) to the start hook and the holds gone from the node to the stop hook,
  then publishes the heartbeat, whose ``started`` lists the holds already handed over.

Which cards a node reports: all of one model. On a node with cards of several models the most common
model (class label) is reported, a tie going to the model of the lowest-indexed card, and the others are
left out (logged as ``cards_ignored``): a node record has one class.

The class label is derived from the card's name and memory (``class_label``) unless ``--gpu-class`` is
given.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib
import io
import json
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from planner.constants import USABLE_FRACTION
from planner.errors import InvalidInput, ModelplanError
from planner.model import Artifact, Option
from planner.pool import ID_PATTERN
from planner.quant import mem_from_class
from producer import constants as K
from producer.client import BeatLog, Client
from worker import logs
from worker.config import PREFIX_ENV, REDIS_URL_ENV, configure_logging
from worker.config import prefix as default_prefix
from worker.config import redis_url as default_redis_url
from worker.constants import DEFAULT_PREFIX, DEFAULT_REDIS_URL, HEARTBEAT_INTERVAL_S
from worker.keys import job_of_hold
from worker.pool import Held
from worker.records import Heartbeat, JobRecord, Replica, Reservation, ServeRequest, parse_heartbeat

log = logs.get_logger("modelplan.agent")


class CardsMissing(ModelplanError):
    """Raised by ``heartbeat_dict`` (and so ``Agent.tick``) when a card class is configured but no card is
    found: the node is not reported as a CPU node, so that it lapses and its jobs are planned again."""

    def __init__(self, node_id: str, gpu_class: str) -> None:
        self.node_id, self.gpu_class = node_id, gpu_class
        super().__init__(
            f"node {node_id!r}: --gpu-class {gpu_class!r} is given but no card was found (neither NVML nor "
            "nvidia-smi answered); no heartbeat published"
        )


class CardReadingError(ModelplanError):
    """Raised by ``cards_from_smi`` and ``memory_from_meminfo`` when a reading is not in the format asked
    for: no heartbeat is better than a wrong one."""

    def __init__(self, source: str, problem: str) -> None:
        super().__init__(f"{source}: {problem}")


# --- readings -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Card:
    """One card as read now."""

    index: int
    """The driver's index (PCI bus order, as nvidia-smi numbers them)."""
    name: str
    uuid: str
    total_mib: int
    used_mib: int
    processes: int
    """Compute processes on it."""

    @property
    def idle(self) -> bool:
        """No compute process holds it and its used memory is under ``FREE_CARD_USED_MIB``."""
        return self.processes == 0 and self.used_mib < K.FREE_CARD_USED_MIB

    @property
    def label(self) -> str:
        return class_label(self.name, self.total_mib)


@dataclass(frozen=True, slots=True)
class HostMemory:
    """The node's RAM in whole GiB (rounded down): total, and available now."""

    total_gb: int
    free_gb: int


def _text(value: str | bytes) -> str:
    # pynvml before 11.5 returns bytes for names and UUIDs
    return value.decode() if isinstance(value, bytes) else str(value)


def cards_from_nvml(readings: Iterable[Mapping[str, Any]]) -> list[Card]:
    """Cards from NVML readings, one mapping per card with ``index``, ``name``, ``uuid``, ``total`` and
    ``used`` bytes, and ``procs`` (the compute processes), as ``nvml_readings`` and the recorded
    ``nvml_*.json`` files give them."""
    cards = [
        Card(
            index=int(r["index"]),
            name=str(r["name"]),
            uuid=str(r["uuid"]),
            total_mib=int(r["total"]) // K.MIB,
            used_mib=int(r["used"]) // K.MIB,
            processes=len(r["procs"]),
        )
        for r in readings
    ]
    return sorted(cards, key=lambda c: c.index)


def _smi_rows(text: str, columns: int, source: str) -> list[list[str]]:
    rows = []
    for row in csv.reader(io.StringIO(text), skipinitialspace=True):
        if not row or not "".join(row).strip():
            continue
        if len(row) != columns:
            raise CardReadingError(source, f"expected {columns} columns, got {len(row)}: {', '.join(row)!r}")
        rows.append([cell.strip() for cell in row])
    return rows


def _mib(cell: str) -> int | None:
    """A MiB figure; None for ``[N/A]`` and the like."""
    return int(cell) if cell.isdigit() else None


def cards_from_smi(cards_csv: str, apps_csv: str) -> list[Card]:
    """Cards from ``nvidia-smi --query-gpu=index,name,uuid,memory.total,memory.used,memory.free,
    utilization.gpu`` and ``--query-compute-apps=gpu_uuid,pid,used_memory`` (both ``csv,noheader,nounits``).
    A card whose used memory reads ``[N/A]`` counts as busy."""
    procs = Counter(row[0] for row in _smi_rows(apps_csv, 3, "nvidia-smi --query-compute-apps"))
    cards = []
    for index, name, card_uuid, total, used, _free, _util in _smi_rows(cards_csv, 7, "nvidia-smi --query-gpu"):
        total_mib = _mib(total)
        if not index.isdigit() or total_mib is None:
            raise CardReadingError("nvidia-smi --query-gpu", f"card {index!r} has no index or memory.total")
        used_mib = _mib(used)
        cards.append(
            Card(
                index=int(index),
                name=name,
                uuid=card_uuid,
                total_mib=total_mib,
                used_mib=total_mib if used_mib is None else used_mib,
                processes=procs[card_uuid],
            )
        )
    return sorted(cards, key=lambda c: c.index)


def memory_from_meminfo(text: str) -> HostMemory:
    """Host memory from ``/proc/meminfo``: ``MemTotal`` and ``MemAvailable`` (kB) as whole GiB."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[key.strip()] = int(parts[0])
    missing = [k for k in ("MemTotal", "MemAvailable") if k not in values]
    if missing:
        raise CardReadingError("/proc/meminfo", f"no {' or '.join(missing)}")
    kib_per_gib = 1 << 20
    return HostMemory(values["MemTotal"] // kib_per_gib, values["MemAvailable"] // kib_per_gib)


_CGROUP_FILES = (
    # (limit, usage, stat, the stat line of page cache that can be reclaimed)
    ("memory.max", "memory.current", "memory.stat", "inactive_file"),
    ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes", "memory/memory.stat", "total_inactive_file"),
)


def cgroup_memory(root: str | Path) -> tuple[int, int] | None:
    """This process's control group's memory limit and what it uses (less page cache that can be
    reclaimed), in bytes, from cgroup v2 then v1 under ``root``; None where there is no limit."""
    for limit_name, used_name, stat_name, inactive_key in _CGROUP_FILES:
        try:
            limit_text = (Path(root) / limit_name).read_text(encoding="ascii").strip()
            used = int((Path(root) / used_name).read_text(encoding="ascii"))
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        if not limit_text.isdigit() or int(limit_text) >= K.CGROUP_NO_LIMIT:
            return None  # "max", or v1's "unlimited"
        inactive = 0
        try:
            for line in (Path(root) / stat_name).read_text(encoding="ascii").splitlines():
                key, _, value = line.partition(" ")
                if key == inactive_key and value.strip().isdigit():
                    inactive = int(value)
        except (OSError, UnicodeDecodeError):
            pass
        return int(limit_text), max(0, used - inactive)
    return None


def memory_within(host: HostMemory, limit: int, used: int) -> HostMemory:
    """The host's memory as a control group limited to ``limit`` bytes, ``used`` of them, may use it."""
    gib = 1 << 30
    return HostMemory(min(host.total_gb, limit // gib), min(host.free_gb, max(0, limit - used) // gib))


# --- the class label ------------------------------------------------------------------------------------

_BRAND_WORDS = frozenset({"nvidia", "geforce", "tesla", "quadro", "generation"})
_NOT_MODEL = re.compile(
    r"\d+(?:gb|gib|g)"  # memory sizes: 80GB, 40GB (the label's own -<GiB>g says it)
    r"|hbm\d*e?|gddr\d*x?"  # memory types: HBM3, HBM2e, GDDR6X
    r"|pcie|sxm\d*",  # form factors: PCIe, SXM4
    re.ASCII,
)


def class_label(name: str, total_mib: int) -> str:
    """A card class label from the driver's name for the card and its memory: ``<model>-<GiB>g``.

    The GiB is ``total_mib // 1024`` (rounded down: what the card has, not its marketed size). The model
    is the name lower-cased and split at spaces, ``-``, ``_`` and ``/``, less the brand words (NVIDIA,
    GeForce, Tesla, Quadro, Generation), memory sizes (80GB), memory types (HBM3, GDDR6X) and form factors
    (PCIe, SXM4), its parts joined by ``-`` with only ``a-z`` and ``0-9`` kept; ``gpu`` when nothing is
    left. So ``NVIDIA H200`` with 143771 MiB is ``h200-140g``, ``NVIDIA A100-SXM4-80GB`` with 81920 MiB is
    ``a100-80g``, and ``NVIDIA GeForce RTX 4090`` with 24564 MiB is ``rtx-4090-23g``. Cards of one model
    with one memory size get one label whatever their form factor.
    """
    kept = []
    for token in re.split(r"[\s\-_/]+", name.lower()):
        token = re.sub(r"[^a-z0-9]", "", token)
        if token and token not in _BRAND_WORDS and not _NOT_MODEL.fullmatch(token):
            kept.append(token)
    model = "-".join(kept)[: K.CLASS_MODEL_MAX_CHARS].strip("-") or "gpu"
    return f"{model}-{total_mib // 1024}g"


def node_cards(cards: Sequence[Card]) -> tuple[list[Card], list[Card]]:
    """The cards a node reports and the ones it leaves out: those of the most common class label, a tie
    going to the label of the lowest-indexed card."""
    ordered = sorted(cards, key=lambda c: c.index)
    if not ordered:
        return [], []
    # Counter keeps first-seen order among equal counts, and most_common is stable: ties go to the
    # label seen first, which is the lowest index's
    top, _ = Counter(c.label for c in ordered).most_common(1)[0]
    return [c for c in ordered if c.label == top], [c for c in ordered if c.label != top]


def heartbeat_dict(
    node_id: str,
    cards: Sequence[Card],
    memory: HostMemory,
    *,
    seq: int,
    boot_id: str,
    gpu_class: str | None = None,
    fabric: str = "",
    started: Sequence[str] = (),
    taken: Iterable[int] = (),
    started_host_gb: float = 0.0,
) -> dict[str, Any]:
    """The heartbeat of a node with ``cards`` (all of one class) and ``memory``.

    ``started`` are the holds already handed to the engine starter; ``taken`` the card indices given to
    them and ``started_host_gb`` the RAM they reserve. A taken card is not free even while it still reads
    idle (its engine is loading, or the start hook runs nothing), so the heartbeat counts it as the
    workers do once the hold is listed in ``started``. Free RAM is what is available less what started
    holds reserve and do not use yet: at most the total less their reservations.
    """
    given = set(taken)
    label = gpu_class if gpu_class is not None else (cards[0].label if cards else "")
    if label and not cards:
        raise CardsMissing(node_id, label)
    if not label:
        cards = []  # --gpu-class "": the node is reported as a CPU node, whatever cards it has
    # a label with a size (h200-140g) carries the card's GiB; one without needs it alongside
    card_gb = 0 if not cards or mem_from_class(label) else min(c.total_mib for c in cards) // 1024
    host_free = max(0, min(memory.free_gb, int(memory.total_gb - started_host_gb)))
    return {
        "node_id": node_id,
        "gpu_class": label,
        "fabric": fabric,
        "gpu_mem_gb": card_gb,
        "gpus": len(cards),
        "free_gpus": sum(1 for c in cards if c.idle and c.index not in given),
        "host_mem_gb": memory.total_gb,
        "host_free_gb": host_free,
        "seq": seq,
        "boot_id": boot_id,
        "started": list(started),
    }


# --- engines --------------------------------------------------------------------------------------------


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


class StartHook(Protocol):
    """Starts a replica's engine on the node: ``reservation`` is its hold here (``replica_of(job,
    reservation.hold_id)`` gives the replica and the option it runs on), ``cards`` the card indices it is
    given (none for a CPU replica).

    It runs inside a tick: it returns once the engine is launched, not once it serves. When it returns,
    the hold goes into the heartbeat's ``started``; when it raises, it is tried again next tick. An agent
    that restarts hands the holds on its node over again, so a start hook checks for an engine it already
    runs for the hold id."""

    def __call__(self, job: JobRecord, reservation: Reservation, cards: tuple[int, ...]) -> None: ...


class StopHook(Protocol):
    """Stops the engine of a hold no longer on the node (``{job_id}:{replica}:{version}``: the job was
    released, or the replica planned again, elsewhere or on other cards), on the cards it was given."""

    def __call__(self, hold_id: str, cards: tuple[int, ...]) -> None: ...


def log_start(job: JobRecord, reservation: Reservation, cards: tuple[int, ...]) -> None:
    """The default start hook: logs what it would start (``engine_start_planned``) and starts nothing."""
    replica = replica_of(job, reservation.hold_id)
    if replica is None or replica.option is None:  # the agent checks before calling
        return
    option = replica.option
    command = engine_command(job.request, option)
    # pipeline parallel over several nodes: which stage this node is (one hold id names all its nodes)
    rank = next(i for i, r in enumerate(replica.placement) if r.node_id == reservation.node_id)
    log.info(
        "engine_start_planned",
        job_id=job.job_id,
        hold_id=reservation.hold_id,
        replica=replica.index,
        engine=option.engine,
        artifact=option.artifact,
        cards=list(cards),
        cuda_visible_devices=engine_env(cards)["CUDA_VISIBLE_DEVICES"],
        host_gb=reservation.host_gb,
        node_rank=rank,
        nodes=len(replica.placement),
        command=command,
        command_line=shlex.join(command),
    )


def log_stop(hold_id: str, cards: tuple[int, ...]) -> None:
    """The default stop hook: logs what it would stop (``engine_stop_planned``)."""
    log.info("engine_stop_planned", job_id=job_of_hold(hold_id), hold_id=hold_id, cards=list(cards))


# --- readers --------------------------------------------------------------------------------------------


class Nvml(Protocol):
    """What the agent uses of ``pynvml`` (the ``nvidia-ml-py`` package)."""

    NVMLError: type[Exception]

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> Sequence[Any]: ...


def nvml_readings(nvml: Nvml) -> list[dict[str, Any]]:
    """Each card as NVML reports it, in the form ``cards_from_nvml`` reads (and the recorded
    ``nvml_*.json`` files hold). Raises ``nvml.NVMLError`` when NVML cannot be started or read."""
    nvml.nvmlInit()
    try:
        out = []
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            out.append(
                {
                    "index": i,
                    "name": _text(nvml.nvmlDeviceGetName(handle)),
                    "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
                    "total": int(mem.total),
                    "used": int(mem.used),
                    "free": int(mem.free),
                    # usedGpuMemory is None where the driver cannot tell (some containers)
                    "procs": [{"pid": int(p.pid), "used": int(p.usedGpuMemory or 0)} for p in procs],
                }
            )
        return out
    finally:
        nvml.nvmlShutdown()


def load_nvml() -> Nvml | None:
    """The ``pynvml`` module, or None when ``nvidia-ml-py`` is not installed."""
    try:
        module: Any = importlib.import_module("pynvml")
    except ImportError:
        return None
    return cast(Nvml, module)


def run_smi(args: Sequence[str]) -> str | None:
    """nvidia-smi's standard output for ``args``; None when it is missing, fails or hangs."""
    try:
        done = subprocess.run([K.SMI, *args], capture_output=True, text=True, timeout=K.SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        log.debug("nvidia_smi_unavailable", error=str(e))
        return None
    if done.returncode != 0:
        log.debug("nvidia_smi_failed", returncode=done.returncode, stderr=done.stderr.strip()[:200])
        return None
    return done.stdout


class Reader(Protocol):
    """Where the agent's readings come from."""

    def cards(self) -> list[Card]: ...
    def memory(self) -> HostMemory: ...


class SystemReader:
    """Reads this machine: cards through NVML, else nvidia-smi, else none (a CPU node); host memory from
    ``/proc/meminfo``, within this process's control group's memory limit where it has one (as in a
    container). Each source can be replaced, for tests; ``cgroup=None`` reads no limit."""

    def __init__(
        self,
        *,
        nvml: Callable[[], Nvml | None] = load_nvml,
        smi: Callable[[Sequence[str]], str | None] = run_smi,
        meminfo: str | Path = K.MEMINFO_PATH,
        cgroup: str | Path | None = K.CGROUP_PATH,
    ) -> None:
        self._nvml = nvml
        self._smi = smi
        self._meminfo = Path(meminfo)
        self._cgroup = cgroup
        self.source = ""
        """Where the last cards came from: ``nvml``, ``nvidia-smi`` or ``none``."""

    def _from(self, source: str, why: str = "") -> None:
        if source != self.source:
            log.info("cards_source", source=source, why=why)
            self.source = source

    def cards(self) -> list[Card]:
        api = self._nvml()
        why = "nvidia-ml-py is not installed"
        if api is not None:
            try:
                cards = cards_from_nvml(nvml_readings(api))
            except api.NVMLError as e:
                why = f"NVML: {e}"
            else:
                self._from("nvml")
                return cards
        listed = self._smi(K.SMI_CARDS_ARGS)
        apps = self._smi(K.SMI_APPS_ARGS) if listed is not None else None
        if listed is None or apps is None:
            self._from("none", f"{why}; nvidia-smi is missing or failed")
            return []
        self._from("nvidia-smi", why)
        return cards_from_smi(listed, apps)

    def memory(self) -> HostMemory:
        host = memory_from_meminfo(self._meminfo.read_text(encoding="ascii"))
        limited = cgroup_memory(self._cgroup) if self._cgroup is not None else None
        return memory_within(host, *limited) if limited else host


def read_boot_id(path: str | Path = K.BOOT_ID_PATH) -> str:
    """This boot's id from the kernel; a random one where there is none (then every agent start looks to
    the workers like a node restart, and the jobs placed on the node are planned again)."""
    try:
        boot_id = Path(path).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        boot_id = ""
    if re.fullmatch(ID_PATTERN, boot_id):
        return boot_id
    boot_id = uuid.uuid4().hex
    log.warning("boot_id_random", path=str(path), boot_id=boot_id)
    return boot_id


# --- the agent ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Started:
    """A hold handed to the start hook: the cards it was given and the RAM it reserves."""

    cards: tuple[int, ...]
    host_gb: float


def _checked(value: str, field: str, allow_empty: bool = False) -> str:
    if (allow_empty and value == "") or re.fullmatch(ID_PATTERN, value):
        return value
    raise InvalidInput(
        "arguments", field, f"{value!r}: only letters, digits, '.', '_' and '-' (up to 128, starting with one)"
    )


class Agent:
    """One node's agent. ``client`` None: a dry run (it reads and builds heartbeats, and hands over nothing)."""

    def __init__(
        self,
        node_id: str,
        reader: Reader,
        client: Client | None = None,
        *,
        gpu_class: str | None = None,
        fabric: str = "",
        boot_id: str | None = None,
        start_hook: StartHook = log_start,
        stop_hook: StopHook = log_stop,
        first_seq: int | None = None,
    ) -> None:
        self.node_id = _checked(node_id, "--node-id")
        self.gpu_class = _checked(gpu_class, "--gpu-class", allow_empty=True) if gpu_class is not None else None
        self.fabric = _checked(fabric, "--fabric", allow_empty=True)
        self.reader = reader
        self.client = client
        self.boot_id = _checked(boot_id, "boot_id") if boot_id is not None else read_boot_id()
        self.start_hook = start_hook
        self.stop_hook = stop_hook
        # the clock in microseconds at start: an agent started again on the same boot goes on rising
        self._seq = first_seq if first_seq is not None else time.time_ns() // 1000
        self.started: dict[str, Started] = {}
        """The holds handed to the start hook (by hold id), in the order they were, with their cards."""
        self._noted: set[str] = set()
        self._seen: tuple[tuple[str, int], tuple[tuple[int, str], ...]] | None = None
        self._beats = BeatLog()

    @property
    def log(self) -> Any:
        # bound at each use, not once: logging may be configured after the agent is made
        return log.bind(node_id=self.node_id, boot_id=self.boot_id)

    def read(self) -> tuple[list[Card], HostMemory]:
        """The cards the node reports (logged when they change) and its host memory."""
        # --gpu-class "" reports a CPU node: its cards are neither read nor given to jobs
        cards, ignored = node_cards(self.reader.cards()) if self.gpu_class != "" else ([], [])
        seen = ((cards[0].label if cards else "", len(cards)), tuple((c.index, c.label) for c in ignored))
        if seen != self._seen:
            self._seen = seen
            self.log.info("cards_found", gpu_class=seen[0][0], gpus=len(cards), cards=[c.index for c in cards])
            if ignored:
                self.log.warning(
                    "cards_ignored",
                    reported=seen[0][0],
                    ignored=[{"index": c.index, "name": c.name, "class": c.label} for c in ignored],
                    why="a node reports one card class: the most common one",
                )
        return cards, self.reader.memory()

    def heartbeat(self, cards: Sequence[Card], memory: HostMemory) -> Heartbeat:
        """The next heartbeat (its ``seq`` one past the last) from readings and the started holds."""
        self._seq += 1
        data = heartbeat_dict(
            self.node_id,
            cards,
            memory,
            seq=self._seq,
            boot_id=self.boot_id,
            gpu_class=self.gpu_class,
            fabric=self.fabric,
            started=list(self.started),
            taken=[i for s in self.started.values() for i in s.cards],
            started_host_gb=sum(s.host_gb for s in self.started.values()),
        )
        return parse_heartbeat(data, f"heartbeat of {self.node_id}")

    def _note(self, hold_id: str, event: str, **kw: Any) -> None:
        """Log why a hold is not handed over, once per hold rather than every tick."""
        if hold_id not in self._noted:
            self._noted.add(hold_id)
            self.log.warning(event, hold_id=hold_id, **kw)

    def hand_off(self, cards: Sequence[Card], client: Client) -> None:
        """Stop the holds no longer on the node; start the ones on it not started yet, each on cards that
        read idle and are not given to another."""
        held: dict[str, Held] = client.held_on(self.node_id)
        # nominations are cards kept idle for a waiting job: nothing runs on them. A reservation made on
        # an earlier boot is for the workers to plan again, not to start here.
        mine = sorted(h for h, v in held.items() if not v.nominated and v.boot_id in ("", self.boot_id))
        for hold in [h for h in self.started if h not in mine]:
            gone = self.started.pop(hold)
            try:
                self.stop_hook(hold, gone.cards)
            except Exception:
                # its cards read busy while its engine lives, so dropping it from started is safe
                self.log.exception("engine_stop_failed", hold_id=hold)
            self.log.info("hold_stopped", hold_id=hold, cards=list(gone.cards))
        self._noted &= set(mine)
        new = [h for h in mine if h not in self.started]
        if not new:
            return
        job_ids = sorted({job_of_hold(h) for h in new})
        records = dict(zip(job_ids, client.records(job_ids), strict=True))
        taken = {i for s in self.started.values() for i in s.cards}
        free = [c.index for c in cards if c.idle and c.index not in taken]
        for hold in new:
            rec = records[job_of_hold(hold)]
            replica = replica_of(rec, hold) if rec is not None else None
            mine_here = [r for r in replica.placement if r.hold_id == hold] if replica else []
            reservation = next((r for r in mine_here if r.node_id == self.node_id), None)
            if rec is None or rec.state.final or replica is None or replica.option is None or reservation is None:
                self._note(hold, "hold_not_startable", state=rec.state.value if rec else "missing")
                continue
            if reservation.gpus > len(free):
                # something outside modelplan took cards since the workers planned: wait for them
                self._note(hold, "engine_start_deferred", needs=reservation.gpus, free=list(free))
                continue
            given, free = tuple(free[: reservation.gpus]), free[reservation.gpus :]
            try:
                self.start_hook(rec, reservation, given)
            except Exception:
                self.log.exception("engine_start_failed", hold_id=hold, cards=list(given))
                free = sorted([*free, *given])
                continue
            self.started[hold] = Started(given, reservation.host_gb)
            self._noted.discard(hold)
            self.log.info("hold_started", hold_id=hold, cards=list(given), host_gb=reservation.host_gb)

    def tick(self) -> Heartbeat:
        """One round: read, hand holds over, publish (dry run: build only). Returns the heartbeat."""
        cards, memory = self.read()
        if self.client is not None:
            self.hand_off(cards, self.client)
        hb = self.heartbeat(cards, memory)
        if self.client is not None:
            self._beats.note(self.log, hb, self.client.publish(hb))
        return hb

    def run(
        self, interval: float, stop_event: threading.Event, each: Callable[[Heartbeat], None] | None = None
    ) -> None:
        """Tick every ``interval`` seconds until ``stop_event`` is set; ``each`` sees every heartbeat. A
        failed tick is logged and the next one comes on time: the agent outlives Redis and driver
        hiccups. Engines keep running when the agent stops."""
        self.log.info("agent_started", interval=interval, dry_run=self.client is None)
        while not stop_event.is_set():
            began = time.monotonic()
            try:
                hb = self.tick()
            except ModelplanError as e:
                self.log.error("heartbeat_failed", error=str(e))
            except Exception:
                self.log.exception("heartbeat_failed")
            else:
                if each is not None:
                    each(hb)
            stop_event.wait(max(0.0, interval - (time.monotonic() - began)))
        self.log.info("agent_stopped")


# --- the command ----------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``modelplan agent``."""
    parser.add_argument("--node-id", help="this node's id (default: the host name)")
    parser.add_argument(
        "--gpu-class",
        help='the card class label, such as h100-80g; "" for a CPU node (default: from the cards\' name and memory)',
    )
    parser.add_argument("--fabric", default="", help="the interconnect the node's cards share with others'")
    parser.add_argument(
        "--interval",
        type=float,
        default=HEARTBEAT_INTERVAL_S,
        help=f"seconds between heartbeats (default {HEARTBEAT_INTERVAL_S:g})",
    )
    parser.add_argument("--once", action="store_true", help="one heartbeat, printed as JSON, then exit")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the heartbeats as JSON lines; publish nothing (no Redis)"
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    for flag, text in (
        ("--redis-url", f"Redis URL (default: ${REDIS_URL_ENV}, else {DEFAULT_REDIS_URL})"),
        ("--prefix", f"key prefix (default: ${PREFIX_ENV}, else {DEFAULT_PREFIX})"),
    ):
        # a parent parser shared with the other commands may have given them already
        with contextlib.suppress(argparse.ArgumentError):
            parser.add_argument(flag, help=text)


def run_from_args(args: argparse.Namespace, *, reader: Reader | None = None) -> int:
    """Run ``modelplan agent`` with parsed arguments; ``reader`` replaces this machine's readings."""
    if not args.interval > 0:
        raise InvalidInput("arguments", "--interval", f"must be more than 0 seconds (given {args.interval})")
    # in a dry run standard output carries the heartbeats, so the log goes to standard error
    configure_logging(args.log_level, sys.stderr if args.dry_run else sys.stdout)
    client = None if args.dry_run else Client.from_url(default_redis_url(args.redis_url), default_prefix(args.prefix))
    agent = Agent(
        args.node_id or socket.gethostname(),
        reader or SystemReader(),
        client,
        gpu_class=args.gpu_class,
        fabric=args.fabric,
    )

    def show(hb: Heartbeat) -> None:
        print(json.dumps(hb.model_dump(mode="json")), flush=True)

    try:
        if args.once:
            show(agent.tick())
            return 0
        stop = threading.Event()
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: stop.set())
        agent.run(args.interval, stop, show if args.dry_run else None)
        return 0
    finally:
        if client is not None:
            client.redis.close()
