"""The engines' settings that move memory, as a request may give them, and each one's default for the card
an option would run on.

A setting left out takes the engine's own default, worked out the way the engine works it out:

- vLLM (``vllm serve``, the API server's usage context): ``EngineArgs.get_batch_defaults``
  (vllm/engine/arg_utils.py, 0.10-0.19) gives ``max_num_batched_tokens`` 8,192 and ``max_num_seqs``
  1,024 where the device has at least 70 GiB of memory and ``"a100" not in device_name``, else 2,048 and
  256 (vLLM's tests/engine/test_arg_utils.py, ``test_defaults_with_usage_context``, pins both rows). The
  planner knows a card by its class label and its GiB (``h100-80g``): the card is taken for an A100 when
  its label holds ``a100`` (``a100-80g``, ``A100-SXM4-80g``), as vLLM reads the lower-cased CUDA device
  name. ``gpu_memory_utilization``: the plan's share (``USABLE_FRACTION``); ``kv_cache_dtype`` ``auto``
  (the model's dtype); ``enforce_eager`` off (CUDA graphs captured); images per prompt: the model's own;
  ``runner`` ``generate``; ``vllm_version`` the release the estimate was fitted on
  (``planner.vllmrelease.DEFAULT_VLLM_VERSION``, 0.19). Where a release profiles otherwise, the estimate
  follows it (``planner.vllmrelease``): before 0.8 (the V0 engine) ``max_num_seqs`` is 256 on every card
  and ``max_num_batched_tokens`` the context (at least 2,048; 2,048 past 32K). ``flashinfer_sampler`` off:
  not assumed installed, so 0.8-0.16 count the sampler's sort. ``gpu_p2p`` on: a tensor-parallel group's
  cards reach each other's memory (``planner.vllmcost.vllm_non_torch`` says what moves where they do not).
  ``nvidia_driver``: a current one (550 or later), whose CUDA graphs the estimate was fitted on.
- llama.cpp (``llama-server``): ``common_params`` (common/common.h) ``n_batch`` 2,048, ``n_ubatch`` 512,
  ``flash_attn_type`` auto (on where the backend supports it: every CUDA card and the CPU), K and V cached
  in f16; ``n_parallel`` auto: 4 slots sharing one unified cache of ``--ctx-size`` tokens
  (tools/server/server.cpp, the default since ggml-org/llama.cpp PR 16736, October 2025), so one request may
  still use the whole context. Given ``parallel`` N, each of
  N slots gets ``--ctx-size / N`` tokens: a plan for a context of C tokens a request starts the server with
  ``-c N×C``, and its cache holds N × C tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planner.constants import GIB, USABLE_FRACTION
from planner.errors import InvalidInput
from planner.platform import Graphs
from planner.pool import invalid_from
from planner.vllmrelease import (
    DEFAULT_RELEASE,
    DEFAULT_VLLM_VERSION,
    DRIVER_PATTERN,
    RELEASE_PATTERN,
    V0_MAX_SEQS,
    Release,
    is_v0,
    old_driver,
    release_of,
    v0_batched_tokens,
)

VLLM_LARGE_CARD_GIB = 70
"""vLLM's threshold for its larger batch defaults: ``device_memory >= 70 * GiB_bytes``."""

VLLM_LARGE_DEFAULTS = (8192, 1024)
VLLM_SMALL_DEFAULTS = (2048, 256)
"""``(max_num_batched_tokens, max_num_seqs)`` for the API server on a large card that is not an A100, and
on every other card (``get_batch_defaults``, ``UsageContext.OPENAI_API_SERVER``)."""

VllmKvDtype = Literal["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"]
"""vLLM's ``--kv-cache-dtype`` choices that the plan can size (vllm/config/cache.py ``CacheDType``): fp8's
variants take one byte an element, the rest the model's two. ``fp8_ds_mla`` (DeepSeek's own layout) is
not sized here."""

LlamacppCacheType = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]
"""llama.cpp's ``--cache-type-k``/``--cache-type-v`` choices (common/arg.cpp ``kv_cache_types``)."""

LLAMACPP_CACHE_BLOCKS: dict[str, tuple[int, int]] = {
    "f32": (4, 1),
    "f16": (2, 1),
    "bf16": (2, 1),
    "q8_0": (34, 32),
    "q4_0": (18, 32),
    "q4_1": (20, 32),
    "iq4_nl": (18, 32),
    "q5_0": (22, 32),
    "q5_1": (24, 32),
}
"""``(bytes, values)`` of one block of each cache type: ggml's blocks of 32 values (ggml/src/ggml-common.h:
``block_q8_0`` is a half scale and 32 int8, 34 bytes; ``block_q4_0`` a half and 16 bytes of nibbles, 18;
``block_q4_1`` two halves, 20; ``block_q5_0`` 22; ``block_q5_1`` 24; ``block_iq4_nl`` 18)."""

LLAMACPP_DEFAULT_BATCH = 2048
LLAMACPP_DEFAULT_UBATCH = 512
LLAMACPP_DEFAULT_SLOTS = 4
"""llama-server's defaults: ``n_batch`` 2,048 and ``n_ubatch`` 512 (common/common.h); 4 slots when
``--parallel`` is left to auto (tools/server/server.cpp), on one unified cache."""

MAX_TOKENS = 1 << 20
MAX_SEQS = 1 << 16
MAX_IMAGES = 1024
MAX_SLOTS = 1024
"""Bounds on what a request may set: past these a figure is a typo, not a setting."""


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class VllmSettings(_Strict):
    """vLLM's settings that move memory, each ``None`` for the engine's default on the card."""

    max_num_batched_tokens: int | None = Field(default=None, ge=16, le=MAX_TOKENS)
    max_num_seqs: int | None = Field(default=None, ge=1, le=MAX_SEQS)
    gpu_memory_utilization: float | None = Field(default=None, gt=0.0, le=1.0)
    kv_cache_dtype: VllmKvDtype | None = None
    enforce_eager: bool | None = None
    images_per_prompt: int | None = Field(default=None, ge=0, le=MAX_IMAGES)
    """``--limit-mm-per-prompt '{"image": N}'``: the images vLLM profiles its encoder with, at most."""
    runner: Literal["generate", "pooling"] | None = None
    """``--runner``: ``pooling`` serves embeddings, with no sampler to profile; default ``generate``."""
    vllm_version: str | None = Field(default=None, pattern=RELEASE_PATTERN)
    """The vLLM release the engine runs (``0.10``, ``0.19.1``): its profile's rules where they differ
    (``planner.vllmrelease``); default ``DEFAULT_VLLM_VERSION``."""
    flashinfer_sampler: bool | None = None
    """FlashInfer samples top-k and top-p (installed, and ``VLLM_USE_FLASHINFER_SAMPLER`` not 0: vLLM logs
    "Using FlashInfer for top-p & top-k sampling"), so the releases that sort the sampler's logits do not;
    default: not assumed."""
    gpu_p2p: bool | None = None
    """The cards of a tensor-parallel group reach each other's memory (CUDA peer access, as
    ``torch.cuda.can_device_access_peer`` reports it). Off where the driver reports none (a VM or container
    that blocks it; vLLM then logs "Custom allreduce is disabled because your platform lacks GPU P2P
    capability"): NCCL goes through the host, and a card holds less outside PyTorch. Default: on."""
    nvidia_driver: str | None = Field(default=None, pattern=DRIVER_PATTERN)
    """The NVIDIA driver the cards run (``535.230.02``, or its branch ``535``): before the 550 branch CUDA
    graphs take about three times the memory (``planner.vllmrelease``). Default: a current driver."""


MAX_CACHE_RAM_MIB = 1 << 24
"""16 TiB of prompt cache, past any node."""


class LlamacppSettings(_Strict):
    """llama-server's settings that move memory, each ``None`` for its default."""

    flash_attn: bool | None = None
    parallel: int | None = Field(default=None, ge=1, le=MAX_SLOTS)
    batch: int | None = Field(default=None, ge=1, le=MAX_TOKENS)
    ubatch: int | None = Field(default=None, ge=1, le=MAX_TOKENS)
    cache_type_k: LlamacppCacheType | None = None
    cache_type_v: LlamacppCacheType | None = None
    cache_ram_mib: int | None = Field(default=None, ge=-1, le=MAX_CACHE_RAM_MIB)
    """llama-server's prompt cache in RAM (``--cache-ram``, MiB): it keeps each idle slot's prompt state
    there, up to 8,192 MiB by default in the releases that have it, which no other figure counts. Default
    here: 0, passed as ``--cache-ram 0`` (no prompt cache); N: passed, and counted in the RAM a replica
    needs; -1: left out, for a release that has no such option (and no such cache)."""


class Settings(_Strict):
    """What a request (or a deployment) sets of each engine; a request may carry files for both."""

    vllm: VllmSettings = VllmSettings()
    llamacpp: LlamacppSettings = LlamacppSettings()


NO_SETTINGS = Settings()


def parse_settings(data: Any, source: str = "settings") -> Settings:
    """Settings from JSON data, or ``InvalidInput`` naming the field (``settings.vllm.max_num_seqs``)."""
    try:
        s = Settings.model_validate(data)
    except ValidationError as e:
        err = invalid_from(e, source)
        raise InvalidInput(source, f"settings.{err.field}", err.problem) from e
    return check_settings(s, source)


def check_settings(s: Settings, source: str = "settings") -> Settings:
    """``s``, or ``InvalidInput`` where two of its settings cannot go together."""
    ll = s.llamacpp
    if ll.batch is not None and ll.ubatch is not None and ll.ubatch > ll.batch:
        raise InvalidInput(source, "settings.llamacpp.ubatch", f"{ll.ubatch} is more than batch {ll.batch}")
    quantised_v = ll.cache_type_v not in (None, "f32", "f16", "bf16")
    if quantised_v and ll.flash_attn is False:
        # llama_init_from_model refuses it: "V cache quantization requires flash_attn"
        raise InvalidInput(source, "settings.llamacpp.cache_type_v", f"{ll.cache_type_v} needs flash_attn on")
    return s


def merged(request: Settings, deployment: Settings) -> Settings:
    """The request's settings, each one it leaves out taken from the deployment's."""
    return Settings(
        vllm=VllmSettings(**{**_given(deployment.vllm), **_given(request.vllm)}),
        llamacpp=LlamacppSettings(**{**_given(deployment.llamacpp), **_given(request.llamacpp)}),
    )


def _given(m: BaseModel) -> dict[str, Any]:
    return {k: v for k, v in m.model_dump().items() if v is not None}


def is_a100(gpu_class: str) -> bool:
    """Whether vLLM would take a card of this class label for an A100 (``"a100" in device_name``)."""
    return "a100" in gpu_class.lower()


PCIE_ONLY_PREFIXES = ("rtx", "gtx", "titan", "t4", "l4", "a10-", "a10g", "a2-", "a16", "radeon", "rx")
"""Class labels of cards sold without NVLink (GeForce and RTX workstation cards, T4, L4, L40/L40S, A10/A10G,
A2, A16, Radeon): the label begins so. Data-centre cards (A100, H100, H200, B200, MI300X) have their
links; a PCIe variant of one is not told apart by its label and is counted as linked, the larger cost."""


def pcie_only(gpu_class: str) -> bool:
    """Whether a card of this class label talks to its peers over PCIe only."""
    return gpu_class.lower().startswith(PCIE_ONLY_PREFIXES)


@dataclass(frozen=True, slots=True)
class VllmRun:
    """vLLM's settings as a card of one class runs them: every one resolved."""

    batched_tokens: int
    max_seqs: int
    gpu_memory_utilization: float
    kv_cache_dtype: str
    enforce_eager: bool
    images_per_prompt: int | None
    """None: the model's own limit."""
    pooling: bool = False
    """``--runner pooling``: no sampler."""
    pcie: bool = False
    """The card's class has no NVLink (``pcie_only``): tensor parallel goes over PCIe."""
    release: Release = DEFAULT_RELEASE
    """The vLLM release, ``(major, minor)``."""
    flashinfer_sampler: bool = False
    """FlashInfer samples: no release sorts the sampler's logits."""
    p2p: bool = True
    """The group's cards have peer access to each other (``VllmSettings.gpu_p2p``)."""
    old_driver: bool = False
    """The cards' driver is older than the 550 branch (``VllmSettings.nvidia_driver``, or the driver the
    class's nodes report): graphs take more."""
    rocm: bool = False
    """The cards are AMD's, under ROCm (as the class's nodes report them): HIP graphs take more."""
    driver_unreported: bool = False
    """No node of the class reported its driver, nor do the settings name one: the graphs are counted as
    a current driver's, with their measured error said (``planner.platform.GRAPHS_ERROR``)."""

    @property
    def kv_bytes_per_element(self) -> int:
        return 1 if self.kv_cache_dtype.startswith("fp8") else 2

    def args(self) -> tuple[str, ...]:
        """The ``vllm serve`` arguments that start the engine as planned."""
        out = [
            "--max-num-batched-tokens",
            str(self.batched_tokens),
            "--max-num-seqs",
            str(self.max_seqs),
            "--gpu-memory-utilization",
            str(self.gpu_memory_utilization),
            "--kv-cache-dtype",
            self.kv_cache_dtype,
        ]
        if self.enforce_eager:
            out.append("--enforce-eager")
        if self.images_per_prompt is not None:
            out += ["--limit-mm-per-prompt", f'{{"image": {self.images_per_prompt}}}']
        if self.pooling:
            out += ["--runner", "pooling"]
        return tuple(out)


def vllm_run(s: VllmSettings, gpu_class: str, card_gb: float, context: int = 0, graphs: Graphs = "current") -> VllmRun:
    """``s`` on a card of class ``gpu_class`` and ``card_gb`` GiB, for a ``max_model_len`` of ``context``
    tokens, each setting left out at vLLM's default for that card and release (the module's docstring
    gives the rules and their sources); ``graphs``: what the class's nodes report of their cards' vendor
    and driver (``planner.platform``), where a setting does not say the driver."""
    release = release_of(s.vllm_version or DEFAULT_VLLM_VERSION)
    large = card_gb * GIB >= VLLM_LARGE_CARD_GIB * GIB and not is_a100(gpu_class)
    tokens, seqs = VLLM_LARGE_DEFAULTS if large else VLLM_SMALL_DEFAULTS
    if is_v0(release):
        tokens, seqs = v0_batched_tokens(context), V0_MAX_SEQS
    return VllmRun(
        batched_tokens=s.max_num_batched_tokens if s.max_num_batched_tokens is not None else tokens,
        max_seqs=s.max_num_seqs if s.max_num_seqs is not None else seqs,
        gpu_memory_utilization=s.gpu_memory_utilization or USABLE_FRACTION,
        kv_cache_dtype=s.kv_cache_dtype or "auto",
        enforce_eager=bool(s.enforce_eager),
        images_per_prompt=s.images_per_prompt,
        pooling=s.runner == "pooling",
        pcie=pcie_only(gpu_class),
        release=release,
        flashinfer_sampler=bool(s.flashinfer_sampler),
        p2p=s.gpu_p2p is not False,
        old_driver=old_driver(s.nvidia_driver) or graphs == "old-driver",
        rocm=graphs == "rocm",
        driver_unreported=graphs == "unreported" and s.nvidia_driver is None,
    )


@dataclass(frozen=True, slots=True)
class LlamacppRun:
    """llama-server's settings resolved: what its buffers and cache are sized by."""

    flash_attn: bool
    slots: int
    unified: bool
    """One cache shared by the slots (the default's auto ``--parallel``): it holds the context once."""
    batch: int
    ubatch: int
    cache_type_k: str
    cache_type_v: str
    cache_ram_mib: int
    """The prompt cache's bound in MiB (0: none), or -1: the option left out (a release without it)."""

    def cache_tokens(self, context: int) -> int:
        """The cells the cache holds for a context of ``context`` tokens a request."""
        return context if self.unified else context * self.slots

    def kv_bytes(self, f16_bytes: int) -> int:
        """The cache in these types, for ``f16_bytes`` of it in f16 (half K, half V)."""
        (bk, nk), (bv, nv) = LLAMACPP_CACHE_BLOCKS[self.cache_type_k], LLAMACPP_CACHE_BLOCKS[self.cache_type_v]
        # half the f16 bytes are K and half V, at 2 bytes a value: K's share times bk/nk over 2, and V's
        return f16_bytes * (bk * nv + bv * nk) // (4 * nk * nv)

    def args(self, context: int) -> tuple[str, ...]:
        """The ``llama-server`` arguments that start it as planned (``-c`` over every slot)."""
        out = ["-c", str(self.cache_tokens(context))]
        if not self.unified:
            out += ["-np", str(self.slots)]
        out += ["-fa", "on" if self.flash_attn else "off", "-b", str(self.batch), "-ub", str(self.ubatch)]
        out += ["-ctk", self.cache_type_k, "-ctv", self.cache_type_v]
        return (*out, "--cache-ram", str(self.cache_ram_mib)) if self.cache_ram_mib >= 0 else tuple(out)

    @property
    def prompt_cache_bytes(self) -> int:
        """What the prompt cache may hold in RAM."""
        return max(self.cache_ram_mib, 0) << 20


def llamacpp_run(s: LlamacppSettings) -> LlamacppRun:
    """``s`` with each setting left out at llama-server's default (the module's docstring)."""
    batch = s.batch if s.batch is not None else LLAMACPP_DEFAULT_BATCH
    ubatch = s.ubatch if s.ubatch is not None else min(LLAMACPP_DEFAULT_UBATCH, batch)
    return LlamacppRun(
        flash_attn=s.flash_attn is not False,
        slots=s.parallel if s.parallel is not None else LLAMACPP_DEFAULT_SLOTS,
        unified=s.parallel is None,
        batch=batch,
        ubatch=min(ubatch, batch),
        cache_type_k=s.cache_type_k or "f16",
        cache_type_v=s.cache_type_v or "f16",
        cache_ram_mib=s.cache_ram_mib if s.cache_ram_mib is not None else 0,
    )
