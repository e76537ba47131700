"""Every threshold, path and bound the client side works with, each with its reason."""

from __future__ import annotations

MIB = 1 << 20
"""Bytes in a MiB: NVML reports bytes, nvidia-smi MiB; the agent counts in MiB."""

FREE_CARD_USED_MIB = 1024
"""A card with no compute process is free only while less than this is used on it. NVML counts the
driver's own reservation as used: 615 MiB on an idle H200 (nvidia-smi shows 0). A CUDA context alone adds
518-612 MiB and an engine tens of GiB, so any process pushes NVML's figure past 1 GiB (measured on an H200:
1235 MiB with a bare PyTorch context); nvidia-smi shows such a process at 621 MiB, under this, and its
process list is what tells. The threshold also catches what the process list cannot show: processes in
other containers."""

SMI_TIMEOUT_S = 4.0
"""How long one nvidia-smi call may run: a wedged driver can hang it, and a reading takes two calls, so two
of these plus the heartbeat interval (5 s) stay inside the node's 15 s TTL. A healthy call takes well
under a second (both took 0.05 s on a one-card H200), a few seconds without persistence mode on many
cards."""

SMI = "nvidia-smi"
SMI_CARDS_ARGS = (
    "--query-gpu=index,name,uuid,memory.total,memory.used,memory.free,utilization.gpu",
    "--format=csv,noheader,nounits",
)
SMI_APPS_ARGS = ("--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits")
"""What the agent asks nvidia-smi when NVML is missing: the cards, then the compute processes (MiB)."""
SMI_DRIVER_ARGS = ("--query-gpu=driver_version", "--format=csv,noheader")
"""And the driver's version, one line a card."""

MEMINFO_PATH = "/proc/meminfo"
PROC_PATH = "/proc"
"""Where the agent reads each process's parent (``PID/stat``) and resident memory (``PID/status``) to
measure a started engine's process tree."""
CGROUP_PATH = "/sys/fs/cgroup"
"""Where this process's control group shows its memory limit: in a container, ``/proc/meminfo`` is the
host's, and the limit (``memory.max`` in cgroup v2, ``memory/memory.limit_in_bytes`` in v1) is what the
node really has."""
CGROUP_NO_LIMIT = 1 << 62
"""A v1 limit at or past this means none: the kernel shows "unlimited" as 2^63 rounded down to a page."""
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
"""Linux's id of the current boot: it changes when the node restarts, and only then."""

FOOTPRINT_STEADY_READINGS = 3
FOOTPRINT_STEADY_SPREAD = 0.02
"""A started engine's footprint is steady, and first sent, once this many readings in a row (one a
heartbeat, 5 s apart) lie within this share of each other on every figure: an engine still loading
weights or capturing graphs grows by far more between two readings; one that serves moves by less."""
FOOTPRINT_NEW_PEAK = 0.05
"""Once sent, a footprint is sent again, the same figures, until one of them reads more than this share
above what was sent: a heartbeat with the same footprint is a refresh, a new one a change every worker
re-reads, so noise must not make changes. A figure that falls is not sent: the most seen is what counts."""

LLAMACPP_ALL_LAYERS = 999
"""``-ngl`` for "every layer on the cards": past the layer count of any model."""

CLASS_MODEL_MAX_CHARS = 100
"""The longest card model part of a derived class label; with ``-<GiB>g`` it stays well inside the 128
characters an id may have."""

ANSWER_TIMEOUT_S = 45.0
"""How long a client acting through its own request stream waits for a worker's answer: a worker answers
in milliseconds, takes over a dead worker's entry after 10 s, and answers one whose workers died three
times as refused, some 30 s on; past this no worker reads the stream."""

METRICS_ADDR = "127.0.0.1"
"""Where ``modelplan metrics --port`` listens unless ``--addr`` says otherwise: loopback, so that node
names, job counts and timings are offered to other hosts only when someone asks for it."""

METRICS_HANDLER_THREADS = 2
"""Scrapes answered at once: one reads Redis for milliseconds, a Prometheus sends one at a time, and the
second leaves room for a person's ``curl`` beside it. No other thread answers, whatever connects."""

METRICS_MAX_PENDING = 64
"""Connections whose request has not yet arrived, at most; past it the oldest is closed. A scraper sends
its request as soon as it connects, so only clients that hold connections open doing nothing are cut."""

METRICS_QUEUED = 8
"""Whole requests waiting for a handler thread, at most; past it a request is closed unanswered rather
than kept waiting behind a flood."""

METRICS_HEAD_DEADLINE_S = 10.0
"""How long a connection has to send its whole request, from the moment it is accepted: Prometheus'
default scrape timeout. A client that sends nothing, or a byte now and then, is closed past it."""

METRICS_SEND_TIMEOUT_S = 10.0
"""How long a handler thread may spend writing one answer: a client that does not read it frees the
thread then."""

METRICS_HEAD_BYTES = 8192
"""The longest request (line and headers) read: a scrape's is a few hundred bytes."""

METRICS_POLL_S = 0.5
"""How often the accepting thread looks for connections past their deadline, and for being stopped."""


SIMULATED_CARDS: dict[str, tuple[str, int]] = {
    "h100-80g": ("NVIDIA H100 80GB HBM3", 81559),
    "h200-140g": ("NVIDIA H200", 143771),
    "a100-40g": ("NVIDIA A100-SXM4-40GB", 40960),
    "a100-80g": ("NVIDIA A100-SXM4-80GB", 81920),
    "l40s-48g": ("NVIDIA L40S", 46068),
    "a10g-24g": ("NVIDIA A10G", 23028),
    "rtx-4090-24g": ("NVIDIA GeForce RTX 4090", 24564),
}
"""The card classes ``modelplan agent --simulate`` offers: each card's name and memory.total in MiB as
nvidia-smi and NVML report them (the H200's from tests/data/h200; the others as producer/agent/labels.py
and docs/OPERATING.md give them), so that a simulated card gets the class label and size a real one does."""

SIMULATED_MAX_CARDS = 64
"""The most cards ``--simulate`` gives a node: more than any server holds, few enough to catch a typo."""
