"""vLLM's releases where its start-up profile differs, and how the estimate follows each: the release is
one of vLLM's settings (``planner.settings.VllmSettings.vllm_version``), ``DEFAULT_VLLM_VERSION`` where
neither a request nor the deployment names one.

The rules, each with its source (vLLM's code or release notes) and the published logs that show it
(``tests/planner/engine_logs/vllm_published.json``):

- The V0 engine (before 0.8, whose release notes make V1 the default engine): ``max_num_seqs`` 256 on
  every card, and a profile of ``max(max_model_len, 2048)`` tokens in one step, or a 2,048-token chunk
  past 32K tokens, where V0 turns chunked prefill on by itself (``EngineArgs._set_default_args_v0`` and
  ``SchedulerConfig``, vllm/engine/arg_utils.py and vllm/config.py of 0.6-0.7; "Chunked prefill is enabled
  by default for models with max_model_len > 32K"). From 0.8 the V1 engine's batch defaults by card
  (``get_batch_defaults``, ``planner.settings``).
- The sampler's profile from 0.8 to 0.16: V1 profiles the sampler with every dummy request at top-k of the
  whole vocabulary less one and top-p below 1 (``_dummy_sampler_run``, vllm/v1/worker/gpu_model_runner.py,
  since vllm-project/vllm PR 13594), and where FlashInfer is not installed V1's top-k/top-p falls back to
  PyTorch (vllm/v1/sample/ops/topk_topp_sampler.py, "Falling back to the PyTorch-native implementation of
  top-p & top-k sampling"), which sorts the whole logits tensor (PR 11394): float32 values, int64 indices
  and the sort's own buffers, ``VLLM_SORT_SAMPLER_BYTES`` a (sequence × vocabulary entry) in all. The
  version sweep below places the end of it at 0.17; the Triton top-k/top-p kernels that became the
  fallback (PR 33538, merged February 2026) are the likely cause. The logs: 0.10.0, 0.10.2 and
  0.11.2 at 1,024 sequences hold 5.19 GiB of activation for Qwen3's 151,936 entries and 4.39 GiB for
  Llama 3's 128,256, the same 36 bytes an entry; the version sweep of one model with the same settings
  (``tests/planner/engine_profiles/vllm_versions.json``) peaks at 5.64 GiB under 0.15 and 0.16 and at 2.23
  under 0.17 and 0.18, and the 0.19 profiles the estimate was fitted on hold the 15 of
  ``VLLM_SAMPLER_BYTES``. Where FlashInfer is installed (and, after 0.11.0, ``nvcc`` with it: PR 26443)
  V1 samples with FlashInfer ("Using FlashInfer for top-p & top-k sampling") and sorts nothing: a
  deployment that knows it says so (``VllmSettings.flashinfer_sampler``); a plan not told counts the sort.
- CUDA graphs: before 0.21 vLLM captures them after it has sized the KV cache, outside its
  ``--gpu-memory-utilization`` share; from 0.21 it profiles them into the share ("CUDA graph memory
  profiling is enabled (default since v0.21.0)"). A card holds them either way, and the estimate counts
  them in what it needs at every release; the published table reads each log by its release
  (``tests/planner/published_vllm.py``).

- The NVIDIA driver: CUDA graphs take about three times the memory under a driver before the 550 branch
  (CUDA 12.4). vllm-project/vllm issue 5517: the same model, vLLM and CUDA toolkit (12.1) with only the
  driver reinstalled took 3.81 GiB of graphs on an A10G (3.79 on an L4) under CUDA 12.2.2 and 12.3.2
  drivers, and 1.14 under a 12.4.1 driver; issue 17462: a V1 capture's runaway memory went away with a 535
  to 550 driver upgrade. A deployment on the 535 branch (still a long-term-support branch) says so
  (``VllmSettings.nvidia_driver``); a plan not told counts a current driver's graphs.

A development build (``0.6.5.dev``, ``0.14.0rc1.dev2+g…``) is none of these: its profile is whatever vLLM's
main branch held that day, and ``vllm_version`` names releases only.
"""

from __future__ import annotations

import re

Release = tuple[int, int]

DEFAULT_VLLM_VERSION = "0.19"
"""The release the estimate's constants were fitted on (``tests/planner/engine_profiles/``, vLLM 0.19.0),
and what a plan counts with when neither the request nor the deployment names one; later releases profile
as it does but for where the graphs sit, which moves no byte a card must hold."""

RELEASE_PATTERN = r"^[0-9]{1,3}\.[0-9]{1,3}(\.[0-9]{1,3})?$"
"""``0.19`` or ``0.19.1``: a release, major and minor (a patch is read and has no rule of its own)."""

V1_FROM: Release = (0, 8)
"""The first release whose default engine is V1 (vLLM 0.8.0's release notes)."""

SORT_SAMPLER_UNTIL: Release = (0, 17)
"""The first release that profiles the sampler without PyTorch's full sort (see the module's docstring)."""

GRAPHS_IN_SHARE_FROM: Release = (0, 21)
"""vLLM profiles CUDA graphs into its share from 0.21."""

VLLM_SORT_SAMPLER_BYTES = 37
"""Activation bytes per (sequence × vocabulary entry) of the sampler's profile where it sorts the logits
(0.8-0.16). Fitted: the published logs at 1,024 sequences need 36 beside the other terms (Qwen3 5.19 GiB,
Llama 3 4.39; ``tests/planner/published_fit.py``); the version sweep of the first fit's profiles
(``tests/planner/engine_profiles/vllm_versions.json``) logs Qwen3-14B's activation peak at 5.64 GiB under
0.15 and 0.16 and 2.23 under 0.17 and 0.18, the same settings: 36.8 bytes an entry less what the
forward pass holds. Counted at 37."""

V0_MIN_BATCHED_TOKENS = 2048
V0_CHUNKED_FROM = 32 * 1024
V0_MAX_SEQS = 256
"""The V0 scheduler's floor on the tokens of a step (and its chunk where chunked prefill is on), the
context past which it turns chunked prefill on, and its ``max_num_seqs``."""

DRIVER_PATTERN = r"^[0-9]{3}(\.[0-9]{1,3}){0,2}$"
"""An NVIDIA driver's version as ``nvidia-smi`` prints it (``535.230.02``), or its branch (``535``)."""

CURRENT_DRIVER_FROM = 550
"""The first driver branch whose CUDA graphs take what the estimate was fitted on (CUDA 12.4's, 550)."""

OLD_DRIVER_GRAPHS = (35, 10)
"""Under an older driver, the part of the estimate's CUDA graph memory that grows with the batch sizes
captured, × 3.5 (its fixed 128 MiB is not scaled). The excess follows the graphs captured: on one machine on
a 535.230.02 driver (DoanNgocCuong/fintech, OCR/vllm.log at three commits, dots.ocr under 0.11.1rc3) 67
piecewise and 35 full graphs took 2.25 GiB and 5 and 4 took 0.24, against a term whose part per size is
0.61 and 0.05 GiB: 3.49 and 2.5 times it beyond the fixed part; counted at 3.5. The same card, vLLM release
and model on 535.183.01 and then 560.35.05 took 0.39 and 0.12 GiB (xlisp/jimw-vllm, a GTX 1080 under
0.6.4.post1), and issue 5517's 3.81 against 1.14 are the same 3.3 times. Llama-3.1-8B on an A100 whose
driver the log does not print took 2.85 against a term of 1.00 (qweewqq/EnergyLLM); the logs on known
550-or-later drivers took 0.65-0.94 times the term (joshhickson/LogoMesh, DaisukeTakai/eval_dataset,
kagaho's L40S pair), and one, a bitsandbytes 4-bit 70B, 1.34 (fridanl/thesis-mas)."""

ROCM_GRAPHS = (36, 10)
"""On an AMD card under ROCm, the part of the estimate's graph memory that grows with the batch sizes
captured, × 3.6 (its fixed 128 MiB is not scaled): HIP graphs were reported at 3.6 times the term on a
ROCm card's start-up log, where every NVIDIA row the constants were fitted on took at most the term. No
ROCm log is in the tables yet (``tests/planner/engine_logs/README-vllm.md``): the figure is the one
reported, counted as it stands, and the tables' error margin covers what it misses
(docs/ESTIMATES.md)."""

_RELEASE = re.compile(RELEASE_PATTERN)
_DRIVER = re.compile(DRIVER_PATTERN)


def release_of(version: str) -> Release:
    """``(0, 10)`` of ``0.10`` or ``0.10.1``."""
    if not _RELEASE.fullmatch(version):
        raise ValueError(f"{version!r} is not a vLLM release such as 0.19 or 0.10.1")
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


DEFAULT_RELEASE = release_of(DEFAULT_VLLM_VERSION)


def is_v0(release: Release) -> bool:
    return release < V1_FROM


def sorts_sampler(release: Release) -> bool:
    """Whether the release's profile sorts the sampler's logits (V1 from 0.8 up to 0.17)."""
    return V1_FROM <= release < SORT_SAMPLER_UNTIL


def v0_batched_tokens(context: int) -> int:
    """The tokens V0 profiles in one step for a ``max_model_len`` of ``context``."""
    if context > V0_CHUNKED_FROM:
        return V0_MIN_BATCHED_TOKENS
    return max(context, V0_MIN_BATCHED_TOKENS)


def old_driver(version: str | None) -> bool:
    """Whether a driver of ``version`` (``535.230.02`` or ``535``) is older than the 550 branch; ``None``, not
    told: taken for a current one."""
    if version is None:
        return False
    if not _DRIVER.fullmatch(version):
        raise ValueError(f"{version!r} is not an NVIDIA driver version such as 535.230.02 or 550")
    return int(version.split(".")[0]) < CURRENT_DRIVER_FROM
