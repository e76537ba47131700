"""What the agent measures of a started hold's engine: the resident memory of its process tree (from
``/proc``), what its processes hold on each of the hold's cards (NVML per process, else nvidia-smi's
compute apps: the recorded H200 readings in tests/data/h200/, and a constructed three-card node), the KV
cache and release from its log; and when a figure is steady enough to send."""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import pytest
from structlog.testing import capture_logs

from producer.agent import footprint
from producer.agent.footprint import Steady, measure, process_tree
from producer.agent.memory import ProcessMemory, parent_from_stat, process_memory_from_status
from producer.agent.probes import CardUse, SystemReader, card_use_from_nvml, card_use_from_smi
from tests.producer.agent.test_agent import FakeNvml, FakeSmi, data, nvml
from worker.footprints import Footprint

MIB = 1 << 20
KIB = 1 << 10
H200_TOTAL = 150754820096
VLLM_LOG = """(APIServer pid=7100) INFO 11-28 15:27:15 [api_server.py:1977] vLLM API server version 0.11.2
(Worker_TP0 pid=7102) INFO 11-28 15:28:09 [gpu_worker.py:359] Available KV cache memory: 105.97 GiB
(Worker_TP1 pid=7103) INFO 11-28 15:28:09 [gpu_worker.py:359] Available KV cache memory: 105.95 GiB
"""
LLAMA_LOG = """build: 6895 (4341dc8bc) with cc (GCC) 15.2.1 20250813 for x86_64-pc-linux-gnu
llama_context: n_ctx         = 8192
llama_kv_cache:      CUDA0 KV buffer size =   256.00 MiB
"""


def stat_line(pid: int, ppid: int, comm: str = "python3") -> str:
    return f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194560 1234 0 0 0 5 3 0 0 20 0 4 0 1000 0 0\n"


def status_text(rss_kib: int | None, hwm_kib: int | None) -> str:
    lines = ["Name:\tpython3", "State:\tS (sleeping)"]
    if hwm_kib is not None:
        lines.append(f"VmHWM:\t{hwm_kib:8d} kB")
    if rss_kib is not None:
        lines.append(f"VmRSS:\t{rss_kib:8d} kB")
    return "\n".join([*lines, "Threads:\t4", ""])


def fake_proc(root: Path, procs: dict[int, tuple[int, int, int]]) -> Path:
    """A ``/proc`` with, per pid, its parent, VmRSS and VmHWM (KiB); and entries that are not processes."""
    for pid, (ppid, rss, hwm) in procs.items():
        (root / str(pid)).mkdir(parents=True)
        # a name with a space and a parenthesis: the parent is read after the last ')'
        (root / str(pid) / "stat").write_text(stat_line(pid, ppid, "vllm (serve)"))
        (root / str(pid) / "status").write_text(status_text(rss, hwm))
    (root / "self").mkdir(exist_ok=True)
    (root / "meminfo").write_text("MemTotal: 1 kB\n")
    return root


# a vLLM engine at tensor parallel 2 (tests/data/h200/nvml_tp2.json): API server 7100, engine core 7101,
# workers 7102 and 7103, and 7104 (a helper without a card); 426 is another engine's, on card 0
TREE = {
    1: (0, 10_000, 10_000),
    426: (1, 2_000_000, 2_100_000),
    7100: (1, 800_000, 900_000),
    7101: (7100, 1_200_000, 1_300_000),
    7102: (7101, 3_000_000, 3_500_000),
    7103: (7101, 3_000_000, 3_400_000),
    7104: (7100, 20_000, 20_000),
}
TREE_RSS = sum(v[1] for k, v in TREE.items() if k >= 7100) * KIB
TREE_HWM = sum(v[2] for k, v in TREE.items() if k >= 7100) * KIB


@pytest.fixture(autouse=True)
def _fresh_log_memory() -> None:
    """What was said once is said again in each test: each starts as a fresh agent."""
    footprint._said.clear()


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    return fake_proc(tmp_path / "proc", TREE)


def reader(proc: Path, nvml_file: str | None = None, smi: tuple[str, str] | None = None) -> SystemReader:
    api = FakeNvml(nvml(nvml_file)) if nvml_file else None
    fake_smi = FakeSmi(data(smi[0]), data(smi[1])) if smi else FakeSmi(None, None)
    return SystemReader(nvml=lambda: api, smi=fake_smi, proc=proc, cgroup=None)


# -- the pure readings --------------------------------------------------------------------------------


def test_parent_from_stat_reads_past_the_name() -> None:
    assert parent_from_stat(stat_line(7102, 7101, "a) S 99 (b")) == 7101
    assert parent_from_stat("") is None
    assert parent_from_stat("12 (x)") is None


def test_process_memory_from_status() -> None:
    assert process_memory_from_status(status_text(1000, 1500)) == ProcessMemory(1000 * KIB, 1500 * KIB)
    # a zombie or a kernel thread has no VmRSS: nothing resident to count
    assert process_memory_from_status(status_text(None, None)) is None
    # no high-water mark: the peak is at least what is resident now
    assert process_memory_from_status(status_text(1000, None)) == ProcessMemory(1000 * KIB, 1000 * KIB)


def test_process_tree_follows_parent_links() -> None:
    parents = {pid: ppid for pid, (ppid, _, _) in TREE.items()}
    assert sorted(process_tree([7100], parents)) == [7100, 7101, 7102, 7103, 7104]
    assert sorted(process_tree([7101], parents)) == [7101, 7102, 7103]
    assert process_tree([9999], parents) == []  # gone: no tree
    # a loop in the links (a pid reused while reading) does not hang
    assert sorted(process_tree([5], {5: 6, 6: 5})) == [5, 6]


def test_card_use_from_recorded_nvml_and_smi_agree() -> None:
    """The recorded H200 node with a 20 GiB tensor held by pid 426: NVML's bytes and nvidia-smi's MiB name
    the same process and the same figure."""
    by_nvml = card_use_from_nvml(nvml("nvml_busy.json"))
    by_smi = card_use_from_smi(data("smi_busy.csv"), data("smi_apps_busy.csv"))
    assert by_nvml == [CardUse(0, H200_TOTAL, ((426, 22017998848),))]
    assert by_smi == [CardUse(0, 143771 * MIB, ((426, 20998 * MIB),))]
    tiny = card_use_from_nvml(nvml("nvml_tiny.json"))
    assert tiny[0].procs == ((434, 641728512),)  # a bare PyTorch context: 612 MiB
    assert card_use_from_smi(data("smi_tiny.csv"), data("smi_apps_tiny.csv"))[0].procs == ((434, 612 * MIB),)
    assert card_use_from_smi(data("smi_idle.csv"), data("smi_apps_idle.csv"))[0].procs == ()


def test_card_use_maps_smi_uuids_to_indices() -> None:
    use = card_use_from_smi(data("smi_tp2.csv"), data("smi_apps_tp2.csv"))
    assert [(c.index, c.procs) for c in use] == [
        (0, ((426, 20998 * MIB),)),
        (1, ((7101, 612 * MIB), (7102, 128050 * MIB))),
        (2, ((7103, 128050 * MIB),)),
    ]
    assert [c.procs for c in card_use_from_nvml(nvml("nvml_tp2.json"))] == [c.procs for c in use]


def test_card_use_unknown_memory_is_none() -> None:
    readings = nvml("nvml_busy.json")
    readings[0]["procs"][0]["used"] = None  # usedGpuMemory None: the driver cannot tell (some containers)
    assert card_use_from_nvml(readings)[0].procs == ((426, None),)
    apps = "GPU-b72516b2-d0ed-641d-8c60-e2c62b6eca29, 426, [N/A]\n"
    assert card_use_from_smi(data("smi_busy.csv"), apps)[0].procs == ((426, None),)


# -- measure ------------------------------------------------------------------------------------------


def test_measure_recorded_nvml_one_card(proc: Path) -> None:
    fp = measure([426], (0,), "llamacpp", LLAMA_LOG, reader(proc, "nvml_busy.json"))
    assert fp == Footprint(
        engine="llamacpp",
        version="b6895",
        source="nvml",
        card_bytes=(22017998848,),
        ram_bytes=2_000_000 * KIB,
        ram_peak_bytes=2_100_000 * KIB,
        kv_bytes=256 * MIB,
    )


def test_measure_recorded_smi_when_nvml_is_missing(proc: Path) -> None:
    fp = measure([426], (0,), "llamacpp", LLAMA_LOG, reader(proc, None, ("smi_busy.csv", "smi_apps_busy.csv")))
    assert fp is not None
    assert (fp.source, fp.card_bytes) == ("nvidia-smi", (20998 * MIB,))


def test_measure_tensor_parallel_tree_on_its_own_cards(proc: Path) -> None:
    """Each of the hold's cards counts every process of the tree on it (engine core and worker on card
    1); card 0 is another engine's and is not counted; the KV part is the smallest rank's."""
    readers: list[tuple[SystemReader, Literal["nvml", "nvidia-smi"]]] = [
        (reader(proc, "nvml_tp2.json"), "nvml"),
        (reader(proc, None, ("smi_tp2.csv", "smi_apps_tp2.csv")), "nvidia-smi"),
    ]
    for r, source in readers:
        fp = measure([7100], (1, 2), "vllm", VLLM_LOG, r)
        assert fp == Footprint(
            engine="vllm",
            version="0.11.2",
            source=source,
            card_bytes=((612 + 128050) * MIB, 128050 * MIB),
            ram_bytes=TREE_RSS,
            ram_peak_bytes=TREE_HWM,
            kv_bytes=int(Decimal("105.95") * (1 << 30)),
        )
    # the hold's cards in the order given: CUDA0 is the first
    fp = measure([7100], (2, 1), "vllm", VLLM_LOG, reader(proc, "nvml_tp2.json"))
    assert fp is not None and fp.card_bytes == (128050 * MIB, (612 + 128050) * MIB)


def test_measure_only_the_holds_cards(proc: Path) -> None:
    """A process of the tree on a card the hold was not given is left out (and said once); a card of the
    hold where the tree holds nothing yet means nothing to say yet."""
    with capture_logs() as logs:
        fp = measure([7100], (1,), "vllm", VLLM_LOG, reader(proc, "nvml_tp2.json"))
        measure([7100], (1,), "vllm", VLLM_LOG, reader(proc, "nvml_tp2.json"))
    assert fp is not None and fp.card_bytes == ((612 + 128050) * MIB,)
    said = [e for e in logs if e["event"] == "footprint_foreign_card"]
    assert len(said) == 1 and said[0]["cards"] == [2]
    assert measure([7100], (0, 1, 2), "vllm", VLLM_LOG, reader(proc, "nvml_tp2.json")) is None


def test_measure_refuses_a_card_figure_past_the_card(proc: Path) -> None:
    readings = nvml("nvml_tp2.json")
    readings[2]["procs"][0]["used"] = H200_TOTAL + 1
    r = SystemReader(nvml=lambda: FakeNvml(copy.deepcopy(readings)), smi=FakeSmi(None, None), proc=proc, cgroup=None)
    with capture_logs() as logs:
        assert measure([7100], (1, 2), "vllm", VLLM_LOG, r) is None
        assert measure([7100], (1, 2), "vllm", VLLM_LOG, r) is None  # said once, not every tick
    [refused] = [e for e in logs if e["event"] == "footprint_refused"]
    assert refused["card"] == 2 and "past the card" in refused["why"]


def test_measure_says_nothing_while_a_figure_is_unknown(proc: Path) -> None:
    readings = nvml("nvml_tp2.json")
    readings[1]["procs"][1]["used"] = None
    r = SystemReader(nvml=lambda: FakeNvml(readings), smi=FakeSmi(None, None), proc=proc, cgroup=None)
    assert measure([7100], (1, 2), "vllm", VLLM_LOG, r) is None
    # no card reading at all (neither NVML nor nvidia-smi): nothing to say for a card hold
    assert measure([7100], (1, 2), "vllm", VLLM_LOG, reader(proc)) is None
    # an engine whose processes are gone
    assert measure([9999], (), "llamacpp", "", reader(proc)) is None


def test_measure_cpu_hold_from_proc(proc: Path) -> None:
    log = "build: 6448 (24a6734d)\nllama_kv_cache:        CPU KV buffer size =  7000.00 MiB\n"
    fp = measure([7101], (), "llamacpp", log, reader(proc, "nvml_tp2.json"))
    rss = sum(TREE[p][1] for p in (7101, 7102, 7103)) * KIB
    hwm = sum(TREE[p][2] for p in (7101, 7102, 7103)) * KIB
    assert fp == Footprint(
        engine="llamacpp", version="b6448", source="proc", ram_bytes=rss, ram_peak_bytes=hwm, kv_bytes=7000 * MIB
    )


def test_measure_names_a_bad_engine(proc: Path) -> None:
    with pytest.raises(ValueError, match="engine 'tgi'"):
        measure([7100], (), "tgi", "", reader(proc))


@pytest.fixture
def engine_tree() -> Iterator[subprocess.Popen[str]]:
    """A real process tree: a parent that starts a child holding 64 MiB it has written to."""
    child = "import sys, time; b = bytes([1]) * (64 << 20); print('ready', flush=True); time.sleep(120)"
    parent = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {child!r}])"
    p = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        yield p
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        if p.stdout is not None:
            p.stdout.close()


def test_measure_a_real_process_tree(engine_tree: subprocess.Popen[str]) -> None:
    r = SystemReader(nvml=lambda: None, smi=FakeSmi(None, None), cgroup=None)
    tree = process_tree([engine_tree.pid], r.parents())
    assert len(tree) == 2 and tree[0] == engine_tree.pid
    fp = measure([engine_tree.pid], (), "llamacpp", "", r)
    assert fp is not None and fp.source == "proc"
    assert 64 * MIB <= fp.ram_bytes <= fp.ram_peak_bytes < 1024 * MIB


# -- steady -------------------------------------------------------------------------------------------


def fp(card: int, ram: int = 1000 * MIB, peak: int | None = None, **kw: Any) -> Footprint:
    return Footprint(
        engine="vllm", source="nvml", card_bytes=(card, card), ram_bytes=ram, ram_peak_bytes=peak or ram, **kw
    )


def test_steady_after_readings_within_the_spread() -> None:
    s = Steady()
    assert s.update(None) is None
    assert s.update(fp(10_000 * MIB)) is None
    assert s.update(fp(30_000 * MIB)) is None  # still loading
    assert s.update(fp(40_000 * MIB)) is None
    assert s.update(fp(40_100 * MIB)) is None
    first = fp(40_200 * MIB, peak=1100 * MIB)
    sent = s.update(first)
    assert sent is not None and s.steady
    # the steady figure, and the most RAM any reading saw
    assert sent.card_bytes == (40_200 * MIB, 40_200 * MIB) and sent.ram_peak_bytes == 1100 * MIB


def test_steady_sends_the_same_footprint_until_a_new_peak() -> None:
    s = Steady()
    for _ in range(3):
        sent = s.update(fp(40_000 * MIB))
    assert sent is not None
    assert s.update(fp(41_500 * MIB)) is sent  # 3.75% up: not a real change
    assert s.update(fp(30_000 * MIB)) is sent  # down: the peak stays what was seen
    assert s.update(None) is sent  # a failed reading: keep sending it
    assert s.update(fp(40_000 * MIB, ram=1040 * MIB)) is sent
    bigger = s.update(fp(42_500 * MIB))  # 6.25% up: a new peak
    assert bigger is not sent and bigger is not None
    assert bigger.card_bytes == (42_500 * MIB, 42_500 * MIB)
    assert s.update(fp(42_000 * MIB)) is bigger
    # RAM past its sent figure by more than 5% is a change too
    more_ram = s.update(fp(42_000 * MIB, ram=1100 * MIB))
    assert more_ram is not bigger and more_ram is not None and more_ram.ram_bytes == 1100 * MIB
    assert more_ram.card_bytes == (42_500 * MIB, 42_500 * MIB)  # figures never go down


def test_steady_sends_what_the_engine_said_once_steady_again() -> None:
    """A release or KV figure read later is news: sent once the readings that carry it are steady."""
    s = Steady()
    for _ in range(3):
        sent = s.update(fp(40_000 * MIB))
    assert sent is not None
    for _ in range(2):
        assert s.update(fp(40_000 * MIB, version="0.11.2", kv_bytes=30_000 * MIB)) is sent
    newer = s.update(fp(40_000 * MIB, version="0.11.2", kv_bytes=30_000 * MIB))
    assert newer is not None and newer is not sent and newer.kv_bytes == 30_000 * MIB


def test_system_reader_keeps_an_unknown_process_figure_unknown(proc: Path) -> None:
    """NVML's ``usedGpuMemory`` None (the driver cannot tell) is not 0 bytes: the footprint waits."""
    readings = nvml("nvml_busy.json")
    readings[0]["procs"][0]["used"] = None
    r = SystemReader(nvml=lambda: FakeNvml(readings), smi=FakeSmi(None, None), proc=proc, cgroup=None)
    assert r.card_use() == ("nvml", [CardUse(0, H200_TOTAL, ((426, None),))])
    assert measure([426], (0,), "llamacpp", LLAMA_LOG, r) is None


def test_system_reader_card_use_falls_back_to_smi(proc: Path) -> None:
    failing = FakeNvml([], init_error="Driver Not Loaded")
    r = SystemReader(nvml=lambda: failing, smi=FakeSmi(data("smi_busy.csv"), data("smi_apps_busy.csv")), proc=proc)
    assert r.card_use() == ("nvidia-smi", [CardUse(0, 143771 * MIB, ((426, 20998 * MIB),))])
    assert reader(proc).card_use() == ("none", [])


def test_a_kv_figure_past_the_cards_is_not_this_engines(proc: Path) -> None:
    log = "vLLM API server version 0.11.2\nAvailable KV cache memory: 200.00 GiB\n"
    with capture_logs() as logs:
        fp = measure([7100], (1, 2), "vllm", log, reader(proc, "nvml_tp2.json"))
    assert fp is not None and fp.kv_bytes == 0
    assert [e["event"] for e in logs if e["event"].startswith("footprint_")] == ["footprint_kv_ignored"]
