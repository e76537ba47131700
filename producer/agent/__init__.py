"""The node agent: reads the node's cards and host memory, publishes its heartbeat at an interval, and
hands the replicas placed on the node to an engine starter.

Three layers, so that each can be tested on its own:

- pure functions: NVML readings, nvidia-smi CSV or ``/proc/meminfo`` in, cards, host memory, a class
  label, a heartbeat or an engine's command line out (``probes``, ``memory``, ``labels``, ``heartbeat``,
  ``engines``);
- readers (``SystemReader`` in ``probes``) that call NVML (the ``nvidia-ml-py`` package, imported only
  when used), else nvidia-smi, and read ``/proc``; tests give their own;
- measuring a started engine (``footprint``): its process tree's resident memory and what its processes
  hold on each of its cards, with the KV cache and release its log states (``engine_log``); ``Steady``
  says when the readings are steady and which footprint the heartbeat carries;
- ``Agent`` (``loop``): one ``tick()`` reads, hands the replicas placed on the node (their holds, by hold
  id ``{job_id}:{replica}:{version}``) to the start hook and the holds gone from the node to the stop hook
  (``hooks``), then publishes the heartbeat, whose ``started`` lists the holds already handed over.

With ``--engines run`` the hooks are a ``Supervisor``'s (``supervise``): it starts each hold's engine as a
child process, keeps a record and a log per hold on the node's disk (``engine_state``), asks the engine's
health, measures what it holds (``measuring``), stops it on release and adopts it after a restart.

``command`` is ``modelplan agent``: its options and the agent run from them.

Which cards a node reports: all of one model. On a node with cards of several models the most common
model (class label) is reported, a tie going to the model of the lowest-indexed card, and the others are
left out (logged as ``cards_ignored``): a node record has one class.

The class label is derived from the card's name and memory (``class_label``): the size a card of its
model is sold as (``l40s-48g``), as the examples and docs name classes, unless ``--gpu-class`` is given;
a ``--gpu-class`` naming a size the cards do not have ``LABELLED_SHARE`` of is refused (``LabelPastCard``).
The heartbeat carries what the cards have (``gpu_mem_gb``), which is what plans count.

Every name is imported here, so ``producer.agent`` is the one import path for callers.
"""

from producer.agent.command import add_arguments, run_from_args
from producer.agent.engine_log import engine_version, kv_per_card, llamacpp_kv, ram_kv, vllm_kv
from producer.agent.engine_state import EngineRecord, default_state_dir, proc_stat
from producer.agent.engines import engine_command, engine_env, gguf_file, replica_of
from producer.agent.errors import CardReadingError, CardsMissing, LabelPastCard
from producer.agent.footprint import Steady, measure, process_tree
from producer.agent.heartbeat import heartbeat_dict
from producer.agent.hooks import StartHook, StopHook, log_start, log_stop
from producer.agent.labels import Card, class_label, node_cards
from producer.agent.loop import Agent, Started
from producer.agent.memory import (
    HostMemory,
    ProcessMemory,
    cgroup_memory,
    memory_from_meminfo,
    memory_within,
    parent_from_stat,
    process_memory_from_status,
)
from producer.agent.probes import (
    CardUse,
    Nvml,
    Reader,
    SystemReader,
    UsageReader,
    card_use_from_nvml,
    card_use_from_smi,
    cards_from_nvml,
    cards_from_smi,
    load_nvml,
    nvml_readings,
    read_boot_id,
    run_smi,
)
from producer.agent.supervise import Supervisor

__all__ = [
    "Agent",
    "Card",
    "CardReadingError",
    "CardUse",
    "CardsMissing",
    "EngineRecord",
    "HostMemory",
    "LabelPastCard",
    "Nvml",
    "ProcessMemory",
    "Reader",
    "StartHook",
    "Started",
    "Steady",
    "StopHook",
    "Supervisor",
    "SystemReader",
    "UsageReader",
    "add_arguments",
    "card_use_from_nvml",
    "card_use_from_smi",
    "cards_from_nvml",
    "cards_from_smi",
    "cgroup_memory",
    "class_label",
    "default_state_dir",
    "engine_command",
    "engine_env",
    "engine_version",
    "gguf_file",
    "heartbeat_dict",
    "kv_per_card",
    "llamacpp_kv",
    "load_nvml",
    "log_start",
    "log_stop",
    "measure",
    "memory_from_meminfo",
    "memory_within",
    "node_cards",
    "nvml_readings",
    "parent_from_stat",
    "proc_stat",
    "process_memory_from_status",
    "process_tree",
    "ram_kv",
    "read_boot_id",
    "replica_of",
    "run_from_args",
    "run_smi",
    "vllm_kv",
]
