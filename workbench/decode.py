"""The public decode entry point: argument checks, split planning, kernel dispatch, warmup.

The pieces a decode is made of (``resolve_call``, ``allocate_workspace``, ``launch_stages``) are shared with
:mod:`workbench.plan`, which binds the same launches once for repeated calls.
"""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from functools import partial
from typing import Callable

import torch

from . import registry
from .kernels.combine import launch_combine
from .kernels.common import INTERPRET, cdiv
from .layout import MODEL1
from .reference import sparse_mla_decode_reference
from .validate import check_decode_args

ROW_INPUTS = ("q", "indices", "extra_indices")  # inputs the kernels need with stride(-1) == 1 (copied if not)
IMPLS = registry.decode_impls()  # the built-in ones; registry.decode_impls() also lists later registrations
MAX_SPLITS_PER_SCOPE = 64   # fixed bound: grid and scratch stay stable under CUDA graphs
SPLIT_GRANULE = 16          # tokens; the smallest BLOCK_T (a kernel's spec may ask for its own, see split_granule)
WAVES = 2                   # programs per SM the split count aims for
NOMINAL_BLOCK_H = 64        # head-group size assumed when planning splits (independent of config)
INTERPRETER_SMS = 4
# The combine is a programmatic dependent launch (combine_pdl) up to this many splits a row. Exploratory H200 run,
# CUDA graphs, PDL vs ordinary launch: at 4-8 splits 1-6% faster (b64 h16 topk2048 52.37 vs 52.91 us, b1 h64
# topk512 8.24 vs 8.84, b32 h16 topk2048 31.23 vs 32.10) or level; at 32 splits up to 36% slower (b4 h64
# topk2048, wgmma_f16: 27.03 vs 19.89 us; under torch.profiler its combine ended 11.5 us after the partial
# instead of 6.2). The pdl sweep at 16 splits (wgmma_f16, 1122): b8 h16 topk2048 4% faster (15.1 vs 15.8 us),
# b8 h64 topk2048 11% slower (24.3 vs 21.9), so 16 stays above the limit
PDL_MAX_SPLITS = 8


@dataclass(frozen=True)
class SplitPlan:
    num_splits: int
    tokens_per_split: int


def plan_splits(*, queries: int, heads: int, topk: int, num_sms: int, waves: int = WAVES,
                granule: int = SPLIT_GRANULE) -> SplitPlan:
    """Split one scope's topk so that queries*head_groups*splits programs fill about waves x num_sms.

    granule: tokens per split are a multiple of it (a kernel with fixed 64-token tiles asks for 64: smaller
    splits would run mostly masked tiles and write more fp32 partials for the combine).
    """
    base = queries * cdiv(heads, NOMINAL_BLOCK_H)
    want = max(1, round(waves * num_sms / base))
    g = granule
    tps = max(g, cdiv(cdiv(topk, want), g) * g)
    tps = max(tps, cdiv(cdiv(topk, MAX_SPLITS_PER_SCOPE), g) * g)
    return SplitPlan(cdiv(topk, tps), tps)


def split_plans(*, queries: int, heads: int, indices, num_sms: int, waves: int = WAVES,
                granule: int = SPLIT_GRANULE) -> list[SplitPlan]:
    """One split plan per KV scope (``indices``: each scope's [b, s_q, topk] index tensor)."""
    return [plan_splits(queries=queries, heads=heads, topk=ix.shape[2], num_sms=num_sms, waves=waves,
                        granule=granule) for ix in indices]


def sm_count(device: torch.device) -> int:
    """The SMs the split plan fills on ``device`` (INTERPRETER_SMS off the GPU): decode and the bench's gather
    probe plan their splits with the same count."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return INTERPRETER_SMS


def _check_runnable(q: torch.Tensor, impl: str) -> None:
    if q.device.type != "cuda" and not INTERPRET:
        raise RuntimeError(f"impl={impl!r} runs Triton kernels: it needs CUDA tensors, or TRITON_INTERPRET=1 "
                           f"set before `import workbench` to run them on the CPU (q is on {q.device})")


# Names of the user inputs of a decode, in the order a plan keeps them; each KV scope's three inputs.
INPUT_NAMES = ("q", "cache", "indices", "topk_length", "attn_sink", "extra_cache", "extra_indices",
               "extra_topk_length")
SCOPE_INPUTS = (("cache", "indices", "topk_length"), ("extra_cache", "extra_indices", "extra_topk_length"))


def sparse_mla_decode(q, cache, indices, *, sm_scale=None, attn_sink=None, topk_length=None,
                      extra_cache=None, extra_indices=None, extra_topk_length=None, impl="auto", config=None,
                      plan=None):
    """Sparse MLA decode over a MODEL1 paged FP8 KV cache (DeepSeek-V4).

    q: [b, s_q, h, 512] bf16; cache: [num_blocks, block_size, 1, 584] uint8/fp8 view;
    indices: [b, s_q, topk] int32 (``page*block_size + offset``, -1 or out of range = invalid);
    attn_sink: [h] fp32; topk_length: [b] int32, only the first topk_length[i] indices of batch i count; it is
    clamped to [0, topk] (a negative length selects nothing, a length above topk selects all); extra_*: a second scope
    in the same softmax.
    sm_scale: a positive real (Python or numpy scalar, or 0-dim tensor); default 512**-0.5.
    impl: "auto" (default: the fastest kernel that passes every GPU check for this device and call size; on
    sm_90 an f16 Gluon rung, "wgmma_f16_2cta" at 17-64 heads up to 4096 selected tokens, the warp-specialised
    "wgmma_ws" at <= 16 heads from 65536 up, else "wgmma_f16"; otherwise "tile512"; see registry.auto_kernel), any
    registered kernel (``workbench.registry.decode_impls()``: the optimisation ladder's rungs "mma", "tile512",
    "tile512_bf16dq", "tile512_3d", "wgmma", "wgmma_4lane", "wgmma_rope", "wgmma_2cta", "wgmma_headwarps",
    "wgmma_xchg", "wgmma_f16", "wgmma_f16_2cta", "wgmma_ws" (the f16 rungs are exact for scale bytes 112..134
    and for |q|, |rope| below 65536, and give NaN outside, see registry.auto_kernel), the per-head "simt"), or
    "reference".
    config: one kernel config (dict) to run without autotuning, e.g. for CUDA graph capture; the keys are
    the kernel's ``registry.get(impl).allowed`` (tiled kernels: BLOCK_H, BLOCK_T, num_warps, num_stages).
    plan: a :class:`workbench.plan.DecodePlan` from :func:`workbench.plan_decode` for inputs of these shapes,
    dtypes, strides and device: the call then skips validation, kernel choice, split planning and allocation,
    checks only that the inputs still match the plan (a mismatch is a ValueError naming the argument) and
    launches the plan's bound kernels, without a host synchronisation. impl ("auto" means the plan's kernel),
    config and sm_scale may be left out; given, they must be the plan's.

    Returns (out [b, s_q, h, 512] bf16, lse [b, h, s_q] fp32): natural-log LSE without the sink;
    a query with no valid token gives out = 0 and lse = +inf.
    WITH A PLAN, out and lse ARE THE PLAN'S OWN BUFFERS (``plan.out``, ``plan.lse``): the next call with the same
    plan overwrites them, as a CUDA graph replay does. Copy them (or use them up) before calling again.
    """
    if plan is not None:
        return plan.launch(q, cache, indices, sm_scale, attn_sink, topk_length, extra_cache, extra_indices,
                           extra_topk_length, impl, config)
    spec, sm_scale = resolve_call(q, cache, indices, sm_scale=sm_scale, attn_sink=attn_sink, topk_length=topk_length,
                                  extra_cache=extra_cache, extra_indices=extra_indices,
                                  extra_topk_length=extra_topk_length, impl=impl)
    if spec.kind == "reference":
        if config is not None:
            raise ValueError("config: the reference has no kernel config")
        out, lse = sparse_mla_decode_reference(q, cache, indices, sm_scale=sm_scale, attn_sink=attn_sink,
                                               topk_length=topk_length, extra_cache=extra_cache,
                                               extra_indices=extra_indices, extra_topk_length=extra_topk_length)
        return out.to(torch.bfloat16), lse
    _check_runnable(q, impl)
    # the ROW_INPUTS: kernels index their rows with a unit last stride
    q, indices, extra_indices = (t if t is None or t.stride(-1) == 1 else t.contiguous()
                                 for t in (q, indices, extra_indices))
    scopes = decode_scopes(cache, indices, topk_length, extra_cache, extra_indices, extra_topk_length)
    work = allocate_workspace(spec, q, scopes)
    for stage in launch_stages(spec, q=q, scopes=scopes, attn_sink=attn_sink, sm_scale=sm_scale, config=config,
                               work=work):
        stage.run()
    return work.out, work.lse


def resolve_call(q, cache, indices, *, sm_scale, attn_sink, topk_length, extra_cache, extra_indices,
                 extra_topk_length, impl):
    """Validate one decode call and pick its kernel: (spec, sm_scale as a float)."""
    if impl not in registry.decode_impls():
        raise ValueError(f"impl: expected one of {registry.decode_impls()}, got {impl!r}")
    check_decode_args(q, cache, indices, sm_scale=sm_scale, attn_sink=attn_sink, topk_length=topk_length,
                      extra_cache=extra_cache, extra_indices=extra_indices, extra_topk_length=extra_topk_length)
    b, s_q, heads, _ = q.shape
    topk_all = indices.shape[2] + (extra_indices.shape[2] if extra_indices is not None else 0)
    spec = registry.get(registry.resolve(impl, q.device, heads=heads, tokens=b * s_q * topk_all))
    return spec, MODEL1.d ** -0.5 if sm_scale is None else float(sm_scale)


def decode_scopes(cache, indices, topk_length, extra_cache=None, extra_indices=None, extra_topk_length=None):
    """The call's KV scopes, each (cache, indices, topk_length); the extra one only when it is given."""
    scopes = [(cache, indices, topk_length)]
    if extra_cache is not None:
        scopes.append((extra_cache, extra_indices, extra_topk_length))
    return tuple(scopes)


@dataclass(frozen=True)
class Workspace:
    """What one decode writes: its outputs, and for split kernels the fp32 partials and their split plans."""

    out: torch.Tensor                 # [b, s_q, h, 512] bf16
    lse: torch.Tensor                 # [b, h, s_q] fp32
    part_out: torch.Tensor | None     # [b*s_q, h, s_total, 512] fp32 (split kinds; None for fused)
    part_lse: torch.Tensor | None     # [b*s_q, h, s_total] fp32
    splits: tuple[SplitPlan, ...]     # one per scope (split kinds)


def allocate_workspace(spec, q, scopes) -> Workspace:
    """Allocate the outputs (and split scratch) of one decode with kernel ``spec`` over ``scopes``."""
    b, s_q, h, _ = q.shape
    out = torch.empty(b, s_q, h, MODEL1.d, dtype=torch.bfloat16, device=q.device)
    lse = torch.empty(b, h, s_q, dtype=torch.float32, device=q.device)
    if spec.kind != "split":
        return Workspace(out, lse, None, None, ())
    splits = tuple(split_plans(queries=b * s_q, heads=h, indices=[ix for _, ix, _ in scopes],
                               num_sms=sm_count(q.device), waves=spec.split_waves,
                               granule=spec.split_granule))
    s_total = sum(p.num_splits for p in splits)
    part_out = torch.empty(b * s_q, h, s_total, MODEL1.d, dtype=torch.float32, device=q.device)
    part_lse = torch.empty(b * s_q, h, s_total, dtype=torch.float32, device=q.device)
    return Workspace(out, lse, part_out, part_lse, splits)


@dataclass(frozen=True)
class LaunchStage:
    """One step of a decode's launch sequence and the user inputs (``INPUT_NAMES``) its launches read."""

    inputs: tuple[str, ...]
    run: Callable[[], None]


def launch_stages(spec, *, q, scopes, attn_sink, sm_scale, config, work: Workspace) -> tuple[LaunchStage, ...]:
    """The launches of one decode, in order: one fused launch, or a partial per scope and the combine.

    The plain path runs them; a plan runs them once under ``capture_launches`` to bind each launch, so both
    paths share one launch sequence.
    """
    if spec.kind == "fused":
        (cache, indices, topk_length), *extra = scopes
        extra_cache, extra_indices, extra_topk_length = extra[0] if extra else (None, None, None)
        return (LaunchStage(INPUT_NAMES, partial(
            spec.launch, q=q, cache=cache, indices=indices, topk_length=topk_length, extra_cache=extra_cache,
            extra_indices=extra_indices, extra_topk_length=extra_topk_length, attn_sink=attn_sink,
            sm_scale=sm_scale, out=work.out, lse=work.lse, config=config)),)
    stages = []
    offset = 0
    for names, (c, ix, tl_), split in zip(SCOPE_INPUTS, scopes, work.splits):
        stages.append(LaunchStage(("q",) + names, partial(
            spec.launch, q=q, cache=c, indices=ix, topk_length=tl_, part_out=work.part_out, part_lse=work.part_lse,
            split_offset=offset, num_splits=split.num_splits, tokens_per_split=split.tokens_per_split,
            sm_scale=sm_scale, config=config)))
        offset += split.num_splits
    stages.append(LaunchStage(("attn_sink",), partial(
        launch_combine, part_out=work.part_out, part_lse=work.part_lse, attn_sink=attn_sink, out=work.out,
        lse=work.lse, pinned=INTERPRET or config is not None, pdl=combine_pdl(spec, work.part_lse.shape[-1]))))
    return tuple(stages)


# this thread's (or task's) forced choice for the combine's launch: None follows the rule
_PDL_OVERRIDE: contextvars.ContextVar[bool | None] = contextvars.ContextVar("combine_pdl_override", default=None)


def pdl_by_splits(s_total: int) -> bool:
    """The rule's split limit alone: a combine over ``s_total`` splits a row is a PDL launch (where the kernel asks
    for one, on the GPU)."""
    return s_total <= PDL_MAX_SPLITS


def combine_pdl(spec, s_total: int) -> bool:
    """Whether the combine is launched as a programmatic dependent of the partial launch before it (PDL, sm_90):
    its launch can then overlap the partial's epilogue (the Gluon rungs signal after their main loop), and it
    waits for the partial grid before reading the partials.

    For kernels that ask for it (``spec.pdl``: the Gluon rungs, which run only on sm_90), on the GPU, at most
    PDL_MAX_SPLITS splits a row, unless :func:`combine_launch` says otherwise here. Only the combine is ever a
    PDL launch: with two KV scopes the extra scope's partial is an ordinary launch, so it starts after the main
    scope's partial has finished, and the combine's wait on it covers both. A plan decides once, when it is made.
    """
    if spec.kind != "split" or not spec.pdl or INTERPRET:
        return False
    forced = _PDL_OVERRIDE.get()
    return pdl_by_splits(s_total) if forced is None else forced


@contextlib.contextmanager
def combine_launch(pdl: bool):
    """Decodes launched (or plans made) inside this block, in this thread or task, launch the combine as a
    programmatic dependent (``pdl=True``, at any split count) or as an ordinary launch (``pdl=False``), for the
    kernels that ask for PDL. The bench's "+pdl" and "+serial" providers time the two against the rule."""
    token = _PDL_OVERRIDE.set(bool(pdl))
    try:
        yield
    finally:
        _PDL_OVERRIDE.reset(token)


def warmup(cases, impl: str = "auto") -> int:
    """Run every case once so each autotune key a server will see is tuned before CUDA graph capture.

    cases: iterable of :class:`workbench.cache.DecodeCase` (or dicts of decode keyword arguments).
    Returns the number of calls made. With a fixed ``config`` no warmup is needed at all.
    """
    n = 0
    for case in cases:
        kw = case if isinstance(case, dict) else case.kwargs()
        sparse_mla_decode(**kw, impl=impl)
        n += 1
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return n
