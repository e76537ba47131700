"""The node agent: readings from a real H200 node (tests/data/h200/), the class label, engine command lines,
``modelplan agent --once --dry-run``, and the hand-off of placed jobs against a real Redis."""

from __future__ import annotations

import argparse
import json
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from structlog.testing import capture_logs

from planner.errors import InvalidInput
from planner.model import Option
from planner.pool import ID_REGEX
from producer import Client
from producer import constants as K
from producer.agent import (
    Agent,
    Card,
    CardReadingError,
    HostMemory,
    SystemReader,
    add_arguments,
    cards_from_nvml,
    cards_from_smi,
    engine_command,
    engine_env,
    heartbeat_dict,
    memory_from_meminfo,
    node_cards,
    nvml_readings,
    read_boot_id,
    run_from_args,
)
from tests.worker.helpers import drain, hb, request, whole_state
from worker.records import JobRecord, JobState, Reservation

DATA = Path(__file__).resolve().parents[2] / "data" / "h200"
H200 = "GPU-b72516b2-d0ed-641d-8c60-e2c62b6eca29"


def data(name: str) -> str:
    return (DATA / name).read_text()


def nvml(name: str) -> list[dict[str, Any]]:
    readings: list[dict[str, Any]] = json.loads(data(name))["gpus"]
    return readings


MEMORY = memory_from_meminfo(data("meminfo.txt"))
IDLE = cards_from_nvml(nvml("nvml_idle.json"))
BUSY = cards_from_nvml(nvml("nvml_busy.json"))


class _NvmlError(Exception):
    pass


class FakeNvml:
    """pynvml as far as the agent uses it, answering from recorded readings (names as bytes, as pynvml
    before 11.5 gives them)."""

    NVMLError: type[Exception] = _NvmlError

    def __init__(self, readings: list[dict[str, Any]], init_error: str = "", driver: str = "580.159.04") -> None:
        self.readings = readings
        self.init_error = init_error
        self.driver = driver
        self.open = 0

    def nvmlInit(self) -> None:
        if self.init_error:
            raise _NvmlError(self.init_error)
        self.open += 1

    def nvmlShutdown(self) -> None:
        self.open -= 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.readings)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        return self.readings[index]

    def nvmlDeviceGetName(self, handle: Any) -> str | bytes:
        return str(handle["name"]).encode()

    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes:
        return str(handle["uuid"])

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        return SimpleNamespace(total=handle["total"], used=handle["used"], free=handle["free"])

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> Sequence[Any]:
        return [SimpleNamespace(pid=p["pid"], usedGpuMemory=p["used"]) for p in handle["procs"]]

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        return self.driver.encode()


@dataclass
class FakeSmi:
    """nvidia-smi answering each query from text; None: missing."""

    cards: str | None
    apps: str | None = ""
    calls: list[tuple[str, ...]] = field(default_factory=list)
    driver: str | None = None
    """``--query-gpu=driver_version``'s answer."""

    def __call__(self, args: Sequence[str]) -> str | None:
        self.calls.append(tuple(args))
        if tuple(args) == K.SMI_DRIVER_ARGS:
            return self.driver
        return self.cards if tuple(args) == K.SMI_CARDS_ARGS else self.apps


def no_smi(args: Sequence[str]) -> str | None:
    raise AssertionError(f"nvidia-smi asked {args} although NVML answered")


@dataclass
class FakeReader:
    cards_now: list[Card]
    memory_now: HostMemory = MEMORY

    def cards(self) -> list[Card]:
        return list(self.cards_now)

    def memory(self) -> HostMemory:
        return self.memory_now


@dataclass
class Hooks:
    """Start and stop hooks that note what they were given."""

    starts: list[tuple[Reservation, tuple[int, ...]]] = field(default_factory=list)
    records: list[JobRecord] = field(default_factory=list)
    stops: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    fail_starts: int = 0

    def start(self, job: JobRecord, reservation: Reservation, cards: tuple[int, ...]) -> None:
        if self.fail_starts:
            self.fail_starts -= 1
            raise RuntimeError("engine would not start")
        self.starts.append((reservation, cards))
        self.records.append(job)

    def stop(self, hold_id: str, cards: tuple[int, ...]) -> None:
        self.stops.append((hold_id, cards))


def card(index: int, name: str = "NVIDIA H200", total: int = 143771, used: int = 615, procs: int = 0) -> Card:
    return Card(index=index, name=name, uuid=f"GPU-{index}", total_mib=total, used_mib=used, processes=procs)


def beat(cards: Sequence[Card], **kw: Any) -> dict[str, Any]:
    return heartbeat_dict("h200-node", cards, MEMORY, seq=7, boot_id="boot-1", **kw)


# --- readings -------------------------------------------------------------------------------------------


def test_nvml_idle_reading_is_one_free_h200() -> None:
    assert [Card(0, "NVIDIA H200", H200, 143771, 615, 0)] == IDLE  # the driver's 615 MiB, no process
    assert beat(IDLE) == {
        "node_id": "h200-node",
        "gpu_class": "h200-140g",
        "fabric": "",
        "gpu_mem_gb": 140,
        "gpus": 1,
        "free_gpus": 1,
        "host_mem_gb": 125,
        "host_free_gb": 125,
        "seq": 7,
        "boot_id": "boot-1",
        "started": [],
    }


def test_nvml_busy_reading_holds_its_only_card() -> None:
    assert [Card(0, "NVIDIA H200", H200, 143771, 21621, 1)] == BUSY  # 22,672,179,200 B used
    assert (beat(BUSY)["gpus"], beat(BUSY)["free_gpus"]) == (1, 0)


def test_smi_readings_busy_by_the_process_list_and_by_memory_alone() -> None:
    busy = cards_from_smi(data("smi_busy.csv"), data("smi_apps_busy.csv"))
    assert busy == [Card(0, "NVIDIA H200", H200, 143771, 21007, 1)]
    # the process list may not show a process (one in another container): its memory still counts
    unseen = cards_from_smi(data("smi_busy.csv"), data("smi_apps_idle.csv"))
    assert unseen == [Card(0, "NVIDIA H200", H200, 143771, 21007, 0)]
    assert [beat(c)["free_gpus"] for c in (busy, unseen)] == [0, 0]
    idle = cards_from_smi(data("smi_idle.csv"), data("smi_apps_idle.csv"))
    assert (idle[0].used_mib, beat(idle)["free_gpus"], beat(idle)["gpu_class"]) == (0, 1, "h200-140g")


def test_a_bare_cuda_context_is_busy_by_nvml_memory_and_by_the_smi_process_list() -> None:
    # NVML counts the driver's 615 MiB: a bare context takes it past the threshold
    [by_nvml] = cards_from_nvml(nvml("nvml_tiny.json"))
    assert (by_nvml.used_mib, by_nvml.processes, by_nvml.idle) == (1235, 1, False)
    assert not replace(by_nvml, processes=0).idle
    # nvidia-smi leaves the driver's share out: 621 MiB is under the threshold, the process list tells
    [by_smi] = cards_from_smi(data("smi_tiny.csv"), data("smi_apps_tiny.csv"))
    assert (by_smi.used_mib, by_smi.processes, by_smi.idle) == (621, 1, False)
    assert replace(by_smi, processes=0).idle


def test_smi_reading_with_memory_not_available_counts_the_card_busy() -> None:
    [c] = cards_from_smi("3, NVIDIA A10G, GPU-x, 23028, [N/A], [N/A], [N/A]\n", "")
    assert (c.index, c.used_mib, c.idle, c.label) == (3, 23028, False, "a10g-24g")


def test_smi_reading_in_another_format_is_refused() -> None:
    with pytest.raises(CardReadingError, match="expected 7 columns, got 2"):
        cards_from_smi("0, NVIDIA H200\n", "")
    with pytest.raises(CardReadingError, match=r"no index or memory\.total"):
        cards_from_smi("0, NVIDIA H200, GPU-x, [N/A], 1, 2, 0\n", "")


def test_host_memory_from_meminfo() -> None:
    # MemTotal 131981020 kB, MemAvailable 131483148 kB: 125.87 and 125.39 GiB, rounded down
    assert HostMemory(total_gb=125, free_gb=125) == MEMORY
    assert memory_from_meminfo("MemTotal: 2097152 kB\nMemAvailable: 1048575 kB\n") == HostMemory(2, 0)
    with pytest.raises(CardReadingError, match="no MemAvailable"):
        memory_from_meminfo("MemTotal: 2097152 kB\n")


def test_a_card_is_free_only_without_processes_and_under_the_threshold() -> None:
    assert K.FREE_CARD_USED_MIB == 1024
    assert card(0, used=1023).idle
    assert not card(0, used=1024).idle
    assert not card(0, used=0, procs=1).idle


# --- the readers ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "cards"), [("nvml_idle.json", IDLE), ("nvml_busy.json", BUSY)])
def test_nvml_reader_reads_what_the_recorded_readings_hold(name: str, cards: list[Card]) -> None:
    fake = FakeNvml(nvml(name))
    assert nvml_readings(fake) == nvml(name) and fake.open == 0
    reader = SystemReader(nvml=lambda: fake, smi=no_smi, meminfo=DATA / "meminfo.txt", cgroup=None)
    assert (reader.cards(), reader.memory(), reader.source) == (cards, MEMORY, "nvml")
    assert fake.open == 0  # NVML shut down after each reading


def test_without_nvml_the_reader_asks_nvidia_smi() -> None:
    smi = FakeSmi(data("smi_busy.csv"), data("smi_apps_busy.csv"))
    reader = SystemReader(nvml=lambda: None, smi=smi)
    assert reader.cards() == cards_from_smi(data("smi_busy.csv"), data("smi_apps_busy.csv"))
    assert (smi.calls, reader.source) == ([K.SMI_CARDS_ARGS, K.SMI_APPS_ARGS], "nvidia-smi")
    # installed but not starting (no driver) is missing too
    failing = FakeNvml(nvml("nvml_idle.json"), init_error="Driver Not Loaded")
    reader = SystemReader(nvml=lambda: failing, smi=FakeSmi(data("smi_busy.csv"), ""))
    assert [c.used_mib for c in reader.cards()] == [21007]


def test_no_nvml_and_no_nvidia_smi_is_a_cpu_node() -> None:
    with capture_logs() as logs:
        reader = SystemReader(nvml=lambda: None, smi=FakeSmi(None, None))
        assert (reader.cards(), reader.cards(), reader.source) == ([], [], "none")
    assert [e["event"] for e in logs] == ["cards_source"]  # said once, not every tick
    assert beat([]) == {**beat(IDLE), "gpu_class": "", "gpu_mem_gb": 0, "gpus": 0, "free_gpus": 0}


def test_boot_id_from_the_kernel_else_random(tmp_path: Path) -> None:
    path = tmp_path / "boot_id"
    path.write_text("3f1c2a9e-5b7d-4e2f-9a61-0c8d7e6b5a43\n")
    assert read_boot_id(path) == "3f1c2a9e-5b7d-4e2f-9a61-0c8d7e6b5a43"
    first, second = read_boot_id(tmp_path / "missing"), read_boot_id(tmp_path / "missing")
    assert first != second and re.fullmatch(ID_REGEX, first)


# --- the cards a node reports (the class label itself: test_labels.py) -------------------------------


def test_a_node_of_mixed_cards_reports_its_most_common_model() -> None:
    a10g, rtx = card(0, "NVIDIA A10G", 23028), card(1, "NVIDIA GeForce RTX 4090", 24564)
    cards = [a10g, rtx, replace(a10g, index=2, uuid="GPU-2")]
    assert node_cards(cards) == ([cards[0], cards[2]], [rtx])
    # a tie goes to the model of the lowest-indexed card
    assert node_cards([rtx, replace(a10g, index=3)]) == ([rtx], [replace(a10g, index=3)])
    agent = Agent("mixed", FakeReader(cards), boot_id="boot-1")
    with capture_logs() as logs:
        hb_ = agent.tick()
        agent.tick()
    assert (hb_.gpu_class, hb_.gpu_mem_gb, hb_.gpus, hb_.free_gpus) == ("a10g-24g", 22, 2, 2)
    ignored = [e for e in logs if e["event"] == "cards_ignored"]
    assert len(ignored) == 1 and ignored[0]["ignored"] == [
        {"index": 1, "name": "NVIDIA GeForce RTX 4090", "class": "rtx-4090-24g"}
    ]


# --- engines --------------------------------------------------------------------------------------------


def test_engine_command_lines() -> None:
    gguf = request("llama-3-8b-gguf", context=8192)
    q4 = "Meta-Llama-3-8B-Instruct-Q4_K_M.gguf"
    model = f"/models/llama-3-8b-gguf/{q4}"
    on_cards = Option(artifact=q4, format="gguf", engine="llamacpp", gpu_class="h200-140g", gpus_per_node=2, nodes=1)
    assert engine_command(gguf, on_cards, models_dir="/models") == [
        "llama-server", "-m", model, "--alias", "llama-3-8b-gguf", "-c", "8192", "-ngl", "999",
        "--split-mode", "layer", "--tensor-split", "1,1",
    ]  # fmt: skip
    on_cpu = Option(artifact=q4, format="gguf", engine="llamacpp", cpu=True)
    assert engine_command(gguf, on_cpu, models_dir="/models") == [
        "llama-server", "-m", model, "--alias", "llama-3-8b-gguf", "-c", "8192", "-ngl", "0"
    ]  # fmt: skip
    vllm = Option(
        artifact="original",
        format="safetensors",
        engine="vllm",
        gpu_class="h100-79g",
        fabric="ib",
        gpus_per_node=8,
        nodes=2,
    )
    assert engine_command(request("llama-3.1-70b-instruct", context=32768), vllm, models_dir="/models")[:13] == [
        "vllm", "serve", "/models/llama-3.1-70b-instruct", "--served-model-name", "llama-3.1-70b-instruct",
        "--tensor-parallel-size", "8", "--pipeline-parallel-size", "2", "--max-model-len", "32768",
        "--gpu-memory-utilization", "0.9",
    ]  # fmt: skip
    # an option that carries the settings it was sized for starts the engine with them
    slots = replace(on_cards, settings=("-c", "32768", "-np", "4", "-fa", "off", "-ub", "1024"))
    assert engine_command(gguf, slots, models_dir="/models") == [
        "llama-server", "-m", model, "--alias", "llama-3-8b-gguf", "-c", "32768", "-np", "4", "-fa", "off",
        "-ub", "1024", "-ngl", "999", "--split-mode", "layer", "--tensor-split", "1,1",
    ]  # fmt: skip
    sized = ("--max-num-seqs", "256", "--gpu-memory-utilization", "0.8", "--enforce-eager")
    eager = replace(vllm, nodes=1, settings=sized)
    assert engine_command(request("llama-3.1-70b-instruct", context=32768), eager)[-6:] == [
        "32768", "--max-num-seqs", "256", "--gpu-memory-utilization", "0.8", "--enforce-eager"
    ]  # fmt: skip
    assert engine_env((0, 3)) == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0,3"}
    assert engine_env(())["CUDA_VISIBLE_DEVICES"] == ""


# --- the command ----------------------------------------------------------------------------------------


def agent_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="modelplan agent")
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_once_dry_run_prints_the_heartbeat_and_needs_no_redis(
    capsys: pytest.CaptureFixture[str], logging_restored: None
) -> None:
    args = agent_args(
        "--once",
        "--dry-run",
        "--node-id",
        "h200-node",
        "--fabric",
        "ib-east",
        "--redis-url",
        "redis://nowhere.invalid:1/0",
    )
    assert run_from_args(args, reader=FakeReader(IDLE)) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1
    printed = json.loads(out[0])
    assert printed["seq"] > 1_700_000_000 * 10**6  # the clock in microseconds
    assert re.fullmatch(ID_REGEX, printed["boot_id"])
    assert {k: v for k, v in printed.items() if k not in ("seq", "boot_id")} == {
        "node_id": "h200-node",
        "gpu_class": "h200-140g",
        "fabric": "ib-east",
        "gpu_mem_gb": 140,
        "gpus": 1,
        "free_gpus": 1,
        "host_mem_gb": 125,
        "host_free_gb": 125,
        "gpu_vendor": "nvidia",  # FakeReader reads no driver: none is published
        "started": [],
    }


def test_arguments_and_their_defaults() -> None:
    args = agent_args()
    assert vars(args) == {
        "node_id": None,
        "gpu_class": None,
        "fabric": "",
        "interval": 5.0,
        "once": False,
        "dry_run": False,
        "log_level": "INFO",
        "engines": "log",
        "state_dir": None,
        "simulate": None,
        "models_dir": None,
        "stop_grace": 10.0,
        "advertise": None,
        "max_restarts": 3,
        "redis_url": None,
        "prefix": None,
    }
    # beside a parent parser that gives --redis-url and --prefix to every command
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--redis-url")
    parent.add_argument("--prefix")
    child = argparse.ArgumentParser(parents=[parent])
    add_arguments(child)
    assert child.parse_args(["--prefix", "p", "--once"]).prefix == "p"


def test_bad_arguments_are_refused_at_the_edge(logging_restored: None) -> None:
    with pytest.raises(InvalidInput, match="--interval"):
        run_from_args(agent_args("--interval", "0", "--dry-run"), reader=FakeReader(IDLE))
    with pytest.raises(InvalidInput, match="--node-id"):
        run_from_args(agent_args("--once", "--dry-run", "--node-id", "a:b"), reader=FakeReader(IDLE))


# --- jobs handed over, against Redis ------------------------------------------------------------------------


def stored(client: Client, node_id: str) -> dict[str, Any]:
    record = client.pool().records[node_id]
    return record.model_dump(mode="json", exclude={"received_at", "schema_version"})


def placed(client: Client, job_id: str) -> tuple[JobRecord, Reservation]:
    """A job placed as one replica on one node, with that node's reservation."""
    rec = client.get(job_id)
    assert rec.state is JobState.PLACED and len(rec.placement) == 1, rec.reason
    return rec, rec.placement[0]


def test_a_placed_job_is_started_on_its_card_and_stopped_when_released(client: Client) -> None:
    hooks = Hooks()
    agent = Agent("gpu-1", FakeReader(IDLE), client, boot_id="boot-1", start_hook=hooks.start, stop_hook=hooks.stop)
    first = agent.tick()
    assert stored(client, "gpu-1") == {**beat(IDLE, gpu_vendor="nvidia"), "node_id": "gpu-1", "seq": first.seq}
    job = client.submit(request("llama-3.1-8b-instruct"))
    drain(client)
    rec, held = placed(client, job)
    assert rec.option is not None and rec.option.gpu_class == "h200-140g"
    assert (held.node_id, held.hold_id, held.gpus) == ("gpu-1", f"{job}:0:{rec.version}", 1)

    second = agent.tick()
    assert hooks.starts == [(held, (0,))] and hooks.records == [rec]
    # the card still reads idle (nothing was started), but it is the job's now
    assert second.seq == first.seq + 1
    assert stored(client, "gpu-1") == {
        **beat(IDLE, gpu_vendor="nvidia"),
        "node_id": "gpu-1",
        "free_gpus": 0,
        "seq": second.seq,
        "started": [held.hold_id],
    }
    [node] = client.pool().nodes
    assert (node.gpus, node.free_gpus) == (1, 0)  # counted once, by the agent
    agent.tick()
    assert len(hooks.starts) == 1 and hooks.stops == []

    client.release(job)
    last = agent.tick()
    assert hooks.stops == [(held.hold_id, (0,))] and agent.started == {}
    assert stored(client, "gpu-1") == {**beat(IDLE, gpu_vendor="nvidia"), "node_id": "gpu-1", "seq": last.seq}
    assert whole_state(client) == {
        "index": {"released": [job]},
        "records": {job: "released"},
        "held": {},
        "held_nodes": [],
    }


def test_a_job_whose_card_reads_busy_waits_for_it_and_a_failed_start_is_tried_again(client: Client) -> None:
    hooks = Hooks(fail_starts=1)
    reader = FakeReader(IDLE)
    agent = Agent("gpu-1", reader, client, boot_id="boot-1", start_hook=hooks.start, stop_hook=hooks.stop)
    agent.tick()
    job = client.submit(request("llama-3.1-8b-instruct"))
    drain(client)
    _, held = placed(client, job)
    reader.cards_now = BUSY  # something outside modelplan took the card since the plan
    with capture_logs() as logs:
        agent.tick()
        agent.tick()
    assert [e["event"] for e in logs if e["event"].startswith("engine")] == ["engine_start_deferred"]  # once
    assert hooks.starts == [] and stored(client, "gpu-1")["started"] == []
    reader.cards_now = IDLE
    with capture_logs() as logs:
        agent.tick()  # the start hook raises: not started
    assert [e["event"] for e in logs if e["event"].startswith("engine")] == ["engine_start_failed"]
    assert stored(client, "gpu-1")["started"] == []
    agent.tick()
    assert hooks.starts == [(held, (0,))] and stored(client, "gpu-1")["started"] == [held.hold_id]


def test_a_cpu_replica_gets_no_card_and_its_ram_is_counted(client: Client) -> None:
    hooks = Hooks()
    agent = Agent("cpu-1", FakeReader([]), client, boot_id="boot-1", start_hook=hooks.start, stop_hook=hooks.stop)
    agent.tick()
    job = client.submit(request("llama-3-8b-gguf"))
    drain(client)
    rec, held = placed(client, job)
    assert rec.option is not None and rec.option.cpu and held.host_gb > 0
    hb_ = agent.tick()
    assert hooks.starts == [(held, ())]
    assert (hb_.gpu_class, hb_.gpus, hb_.started) == ("", 0, (held.hold_id,))
    # MemAvailable still reads 125 GiB: the replica's reservation is taken off what is free
    assert hb_.host_free_gb == int(125 - held.host_gb) < 125
    assert engine_command(rec.request, rec.option)[-2:] == ["-ngl", "0"]


def test_holds_from_an_earlier_boot_are_not_started(client: Client) -> None:
    client.heartbeat(hb("gpu-1", "h200-140g", gpus=1, boot="boot-0", host=125))
    job = client.submit(request("llama-3.1-8b-instruct"))
    drain(client)
    _, old = placed(client, job)
    hooks = Hooks()
    agent = Agent("gpu-1", FakeReader(IDLE), client, boot_id="boot-1", start_hook=hooks.start, stop_hook=hooks.stop)
    agent.tick()  # the node restarted: the workers plan the job again
    assert hooks.starts == []
    drain(client)
    _, new = placed(client, job)
    assert new.hold_id != old.hold_id
    agent.tick()
    assert hooks.starts == [(new, (0,))]


def test_the_default_hooks_log_what_they_would_run(client: Client) -> None:
    agent = Agent("gpu-1", FakeReader(IDLE), client, boot_id="boot-1")
    agent.tick()
    job = client.submit(request("llama-3.1-8b-instruct", context=8192))
    drain(client)
    _, held = placed(client, job)
    with capture_logs() as logs:
        agent.tick()
        client.release(job)
        agent.tick()
    [planned] = [e for e in logs if e["event"] == "engine_start_planned"]
    assert {k: v for k, v in planned.items() if k not in ("command", "command_line")} == {
        "event": "engine_start_planned",
        "log_level": "info",
        "job_id": job,
        "hold_id": held.hold_id,
        "replica": 0,
        "engine": "vllm",
        "artifact": "original",
        "cards": [0],
        "cuda_visible_devices": "0",
        "host_gb": 0.0,
        "node_rank": 0,
        "nodes": 1,
    }
    # the settings the plan sized the card for: vLLM's defaults on an 80 GiB card that is not an A100
    assert planned["command_line"] == (
        "vllm serve MODELS_DIR/llama-3.1-8b-instruct --served-model-name llama-3.1-8b-instruct "
        "--tensor-parallel-size 1 --pipeline-parallel-size 1 "
        "--max-model-len 8192 --max-num-batched-tokens 8192 --max-num-seqs 1024 --gpu-memory-utilization 0.9 "
        "--kv-cache-dtype auto"
    )
    [stopped] = [e for e in logs if e["event"] == "engine_stop_planned"]
    assert (stopped["job_id"], stopped["hold_id"], stopped["cards"]) == (job, held.hold_id, [0])


def test_once_publishes_through_redis(redis_url: str, client: Client, logging_restored: None) -> None:
    args = agent_args("--once", "--node-id", "gpu-9", "--fabric", "ib-east", "--redis-url", redis_url)
    assert run_from_args(args, reader=FakeReader(IDLE)) == 0
    record = stored(client, "gpu-9")
    published = beat(IDLE, fabric="ib-east", gpu_vendor="nvidia")
    assert {k: v for k, v in record.items() if k not in ("seq", "boot_id")} == {
        k: v for k, v in published.items() if k not in ("seq", "boot_id", "node_id")
    } | {"node_id": "gpu-9"}


@dataclass
class FlakyReader(FakeReader):
    """Fails its second reading, as a driver hiccup would."""

    reads: int = 0

    def cards(self) -> list[Card]:
        self.reads += 1
        if self.reads == 2:
            raise CardReadingError("nvidia-smi --query-gpu", "garbled")
        return super().cards()


def test_run_goes_on_past_a_failed_tick_until_stopped(client: Client) -> None:
    stop = threading.Event()
    seen: list[int] = []

    def each(beat_: Any) -> None:
        seen.append(beat_.seq)
        if len(seen) == 2:
            stop.set()

    agent = Agent("gpu-1", FlakyReader(IDLE), client, boot_id="boot-1", first_seq=100)
    with capture_logs() as logs:
        agent.run(0.001, stop, each)
    assert seen == [101, 102]
    assert [e["event"] for e in logs if e["event"].startswith(("agent", "heartbeat"))] == [
        "agent_started",
        "heartbeat_failed",
        "agent_stopped",
    ]
    assert client.last_seq("gpu-1", "boot-1") == 102  # a refresh: its seq kept beside the record
