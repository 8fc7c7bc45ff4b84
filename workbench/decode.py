"""The public decode entry point: argument checks, split planning, kernel dispatch, warmup.

The pieces a decode is made of (``resolve_call``, ``allocate_workspace``, ``launch_stages``) are shared with
:mod:`workbench.plan`, which binds the same launches once for repeated calls. The plain path keeps such plans
itself (:class:`PlainPlans`, ``PLAIN_PLANS``): a call like an earlier one replays that call's plan.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import threading
from collections import Counter
from dataclasses import dataclass
from functools import partial
from typing import Callable

import numpy as np
import torch

from . import registry
from .kernels.combine import launch_combine
from .kernels.common import _CAPTURE, INTERPRET, cdiv
from .kernels.configs import KernelConfig
from .format.layout import MODEL1
from .format.reference import sparse_mla_decode_reference
from .validate import check_decode_args

ROW_INPUTS = ("q", "indices", "extra_indices")  # inputs the kernels need with stride(-1) == 1 (copied if not)
IMPLS = registry.decode_impls()  # the built-in ones; registry.decode_impls() also lists later registrations
MAX_SPLITS_PER_SCOPE = 64   # fixed bound: grid and scratch stay stable under CUDA graphs
SPLIT_GRANULE = 16          # tokens; the smallest BLOCK_T (a kernel's spec may ask for its own, see split_granule)
WAVES = 2                   # programs per SM the split count aims for
NOMINAL_BLOCK_H = 64        # head-group size assumed when planning splits (independent of config)
INTERPRETER_SMS = 4
# The combine is a programmatic dependent launch (combine_pdl) up to this many splits a row: PDL helps at 4-8
# splits and hurts at 16 and more (data/bench_h200_20261201-1122_pdl.csv; the history: docs/decisions.md)
PDL_MAX_SPLITS = 8
PLAIN_PLANS_MAX = 16  # plans the plain path keeps (least recently used dropped first); each holds its split scratch

# The Triton interpreter keeps a launch's grid state (and its patched tl functions) globally: two threads running
# interpreted kernels at once fail (InterpreterError 'z >= grid_dim[2]') or compute garbage. Every interpreted launch
# sequence of a decode (plain path, plan replay, plan making) holds this lock; compiled launches never take it.
INTERPRETER_LOCK = threading.RLock()
_SERIALISE_LAUNCHES = INTERPRET  # fixed at import, like the kernels' decoration (tests patch INTERPRET itself)


# plan.make_plan, handed over by workbench.plan when it is imported (the package imports it): plan builds on
# decode, so decode does not import plan
_PLAN_MAKER = None


def use_plan_maker(make_plan) -> None:
    """Where the plain path's plan cache gets its plans (``workbench.plan`` sets ``plan.make_plan``)."""
    global _PLAN_MAKER
    _PLAN_MAKER = make_plan


def interpreter_lock():
    """INTERPRETER_LOCK under the interpreter, a no-op context when the kernels are compiled."""
    return INTERPRETER_LOCK if _SERIALISE_LAUNCHES else contextlib.nullcontext()


@dataclass(frozen=True)
class SplitPlan:
    num_splits: int
    tokens_per_split: int


def splits_to_fill(*, waves: int, num_sms: int, queries: int, heads: int, block_h: int) -> int:
    """The splits a query's heads take so that queries x head groups x splits programs make about ``waves`` waves
    on ``num_sms`` SMs (Python's round, half to even: 132 / 88 = 1.5 gives 2; 0 when the queries alone fill them)."""
    return round(waves * num_sms / (queries * cdiv(heads, block_h)))


def plan_splits(*, queries: int, heads: int, topk: int, num_sms: int, waves: int = WAVES,
                granule: int = SPLIT_GRANULE, want: int | None = None, block_h: int = NOMINAL_BLOCK_H) -> SplitPlan:
    """Split one scope's topk so that queries*head_groups*splits programs fill about waves x num_sms (``want``:
    that many splits at most instead, for a scope that shares one launch with another: :func:`spec_split_plans`).

    granule: tokens per split are a multiple of it (a kernel with fixed 64-token tiles asks for 64: smaller
    splits would run mostly masked tiles and write more fp32 partials for the combine). block_h: the heads a program
    holds, as the plan counts the programs of a split.
    """
    if want is None:
        want = max(1, splits_to_fill(waves=waves, num_sms=num_sms, queries=queries, heads=heads, block_h=block_h))
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
    impl: "auto" (default: the fastest kernel for this device and call size, from the crossover sweeps: on sm_90 a
    Gluon rung that passes every GPU check, chosen by heads, selected tokens and queries (the rule, with the tables
    it rests on: registry.auto_kernel's docstring, not restated here, since a copy went stale); on sm_100/sm_120 a
    portable warp-specialised rung (registry.portable_kernel); below sm_90 "tile512"), any
    registered kernel (``workbench.registry.decode_impls()``: the seed's "mma", the portable "tile512" and
    "portable_ws" (mma.sync, no wgmma), the bf16
    Hopper rung "wgmma_xchg", the f16 rungs "wgmma_f16", "wgmma_f16_2cta", "wgmma_ws" (exact on every cache:
    outside their f16 window a split runs again in bf16, see gluon_common.F16_MIN_SCALE_BYTE), the per-head
    "simt"; the ladder's removed rungs are in data/rungs.csv), or "reference".
    config: one kernel config (dict) to run without autotuning, e.g. for CUDA graph capture; the keys are
    the kernel's ``registry.get(impl).allowed`` (tiled kernels: BLOCK_H, BLOCK_T, num_warps, num_stages).
    plan: a :class:`workbench.plan.DecodePlan` from :func:`workbench.plan_decode` for inputs of these shapes,
    dtypes, strides and device: the call then skips validation, kernel choice, split planning and allocation,
    checks only that the inputs still match the plan (a mismatch is a ValueError naming the argument) and
    launches the plan's bound kernels, without a host synchronisation. impl ("auto" means the plan's kernel),
    config and sm_scale may be left out; given, they must be the plan's.
    Without a plan, a call that matches an earlier one replays the plan that call made (see :class:`PlainPlans`:
    the same shapes, strides, dtypes, devices, pointer alignment, optional inputs, impl, config, sm_scale, combine
    launch and CUDA stream), so only the first call of a kind pays for validation, kernel choice and planning;
    ``PLAIN_PLANS.enabled = False`` (or WORKBENCH_PLAIN_PLANS=0 before import) turns that off.

    Returns (out [b, s_q, h, 512] bf16, lse [b, h, s_q] fp32): natural-log LSE without the sink;
    a query with no valid token gives out = 0 and lse = +inf. Without a plan they are new tensors every call.
    WITH A PLAN, out and lse ARE THE PLAN'S OWN BUFFERS (``plan.out``, ``plan.lse``): the next call with the same
    plan overwrites them, as a CUDA graph replay does. Copy them (or use them up) before calling again.
    """
    if plan is not None:
        return plan.launch(q, cache, indices, sm_scale, attn_sink, topk_length, extra_cache, extra_indices,
                           extra_topk_length, impl, config)
    if PLAIN_PLANS.enabled:
        done = PLAIN_PLANS.call(q, cache, indices, sm_scale, attn_sink, topk_length, extra_cache, extra_indices,
                                extra_topk_length, impl, config)
        if done is not None:
            return done
    return plain_decode(q, cache, indices, sm_scale=sm_scale, attn_sink=attn_sink, topk_length=topk_length,
                        extra_cache=extra_cache, extra_indices=extra_indices, extra_topk_length=extra_topk_length,
                        impl=impl, config=config)


def plain_decode(q, cache, indices, *, sm_scale=None, attn_sink=None, topk_length=None, extra_cache=None,
                 extra_indices=None, extra_topk_length=None, impl="auto", config=None):
    """The plain path without the plan cache: validate, choose, plan the splits, allocate, launch (every call)."""
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
    stages = launch_stages(spec, q=q, scopes=scopes, attn_sink=attn_sink, sm_scale=sm_scale, config=config, work=work)
    with interpreter_lock():
        for stage in stages:
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
    spec = registry.get(registry.resolve(impl, q.device, heads=heads, tokens=b * s_q * topk_all, queries=b * s_q,
                                         scopes=1 if extra_indices is None else 2))
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
    splits: tuple[SplitPlan, ...]     # one per scope (split kinds; one in all for a joined_scopes kernel)
    direct: bool = False              # one split in all and a kernel that writes out and lse itself: no combine


def spec_split_plans(spec, *, queries: int, heads: int, topks, num_sms: int) -> tuple[SplitPlan, ...]:
    """The split plans (one per KV scope of ``topks`` indices; one over them all for a ``joined_scopes`` kernel,
    whose splits read each query's index rows joined) split kernel ``spec`` runs. A launch per scope fills the SMs
    on its own; scopes in one launch (KernelSpec.two_scopes) fill them together, each with a share of the
    programs in proportion to its topk: planned apart, b8 h128 at the production shape (topk 128 + 512) made 160
    one-block-per-SM programs on 132 SMs, two waves (wgmma_xchg 26.9 us against FlashMLA's 16.5, exploratory run
    at 4d6704b: data/explore/explore_h200_20261204-1258_two_scopes.csv)."""
    topks = [sum(topks)] if spec.joined_scopes else list(topks)
    wants = [None] * len(topks)
    block_h = spec.split_block_h or NOMINAL_BLOCK_H
    if spec.two_scopes and len(topks) > 1 and sum(topks):
        # the launch's splits in all first, then shared: rounding each scope's share up on its own overshot one wave
        # (b32 h128 topk 128 + 512 on wgmma_xchg: 1 + 2 splits x 64 programs = 192 on 132 SMs)
        total = max(len(topks), splits_to_fill(waves=spec.split_waves, num_sms=num_sms, queries=queries, heads=heads,
                                               block_h=block_h))
        wants = largest_remainder(total, topks)
    return tuple(plan_splits(queries=queries, heads=heads, topk=k, num_sms=num_sms, waves=spec.split_waves,
                             granule=spec.split_granule, want=w, block_h=block_h) for k, w in zip(topks, wants))


def largest_remainder(total: int, weights) -> list[int]:
    """``total`` shared in proportion to ``weights``, one each first and the remainder to the largest fractions
    (needs total >= len(weights) and a positive sum of weights: spec_split_plans guards both)."""
    s = sum(weights)
    exact = [1 + (total - len(weights)) * w / s for w in weights]
    parts = [int(x) for x in exact]
    for i in sorted(range(len(weights)), key=lambda i: exact[i] - parts[i], reverse=True)[: total - sum(parts)]:
        parts[i] += 1
    return parts


def call_splits(spec, q, scopes) -> tuple[SplitPlan, ...]:
    """The split plans of a call of split kernel ``spec`` (one per KV scope, or one over both: joined_scopes), as its
    decode runs them."""
    b, s_q, h, _ = q.shape
    return spec_split_plans(spec, queries=b * s_q, heads=h, topks=[ix.shape[2] for _, ix, _ in scopes],
                            num_sms=sm_count(q.device))


def runs_direct(spec, splits) -> bool:
    """Whether a call with these split plans runs no combine: one split in all, on a kernel that writes out and lse
    itself then (KernelSpec.direct)."""
    return spec.direct and sum(p.num_splits for p in splits) == 1


def allocate_workspace(spec, q, scopes) -> Workspace:
    """Allocate the outputs (and split scratch) of one decode with kernel ``spec`` over ``scopes``."""
    b, s_q, h, _ = q.shape
    out = torch.empty(b, s_q, h, MODEL1.d, dtype=torch.bfloat16, device=q.device)
    lse = torch.empty(b, h, s_q, dtype=torch.float32, device=q.device)
    if spec.kind != "split":
        return Workspace(out, lse, None, None, ())
    splits = call_splits(spec, q, scopes)
    if runs_direct(spec, splits):  # no combine: no partials
        return Workspace(out, lse, None, None, splits, direct=True)
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
    """The launches of one decode, in order: one fused launch, or a partial per scope (one over both scopes for a
    ``two_scopes`` or ``joined_scopes`` kernel) and the combine, or (a ``direct`` workspace: one split in all) one
    partial launch that writes out and lse itself.

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
    # a direct call's one partial launch writes out and lse and reads the sink: no combine follows
    part_out, part_lse = (work.out, work.lse) if work.direct else (work.part_out, work.part_lse)
    direct = dict(direct=True, attn_sink=attn_sink) if work.direct else {}
    sink = ("attn_sink",) if work.direct else ()
    stages = []
    if len(scopes) == 2 and (spec.joined_scopes or spec.two_scopes):
        # one partial launch over both scopes, so no launch waits on another: a joined_scopes kernel's splits read
        # them as one stream (one plan); a two_scopes kernel's extra scope has splits of its own after the first's
        ((c, ix, tl_), (xc, xix, xtl)), (split, *extra_plan) = scopes, work.splits
        extra_splits = {} if spec.joined_scopes else dict(extra_num_splits=extra_plan[0].num_splits,
                                                          extra_tokens_per_split=extra_plan[0].tokens_per_split)
        stages.append(LaunchStage(("q",) + SCOPE_INPUTS[0] + SCOPE_INPUTS[1] + sink, partial(
            spec.launch, q=q, cache=c, indices=ix, topk_length=tl_, part_out=part_out, part_lse=part_lse,
            split_offset=0, num_splits=split.num_splits, tokens_per_split=split.tokens_per_split, sm_scale=sm_scale,
            config=config, extra_cache=xc, extra_indices=xix, extra_topk_length=xtl, **extra_splits, **direct)))
    else:
        offset = 0
        for names, (c, ix, tl_), split in zip(SCOPE_INPUTS, scopes, work.splits):
            stages.append(LaunchStage(("q",) + names + sink, partial(
                spec.launch, q=q, cache=c, indices=ix, topk_length=tl_, part_out=part_out, part_lse=part_lse,
                split_offset=offset, num_splits=split.num_splits, tokens_per_split=split.tokens_per_split,
                sm_scale=sm_scale, config=config, **direct)))
            offset += split.num_splits
    if work.direct:
        return tuple(stages)
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
    PDL launch: with two KV scopes a ``two_scopes`` or ``joined_scopes`` kernel's one partial launch covers both;
    another kernel's extra scope partial is an ordinary launch, so it starts after the main scope's partial has
    finished, and the combine's wait on it covers both. A plan decides once, when it is made.
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


# ---- the plain path's plans ------------------------------------------------------------------------------------

_NO_KEY = object()         # a call argument the cache cannot key on: the call takes the plain path
_UNPLANNABLE = object()    # cached for a key whose plan could not be made: its calls take the plain path
_ALIGN_MASK = 15           # pointer alignment a compiled plan may assume (plan.POINTER_ALIGN - 1)
# bound once: the per-call stream, device and graph-capture queries, in C (absent from a CPU-only torch, where
# no tensor is on a GPU); torch.cuda.is_available() is not asked at import (it would initialise CUDA)
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)      # Triton's get_current_stream
_current_device = getattr(torch._C, "_cuda_getDevice", None)
_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None)  # torch.cuda.is_current_stream_capturing


def _scale_key(sm_scale):
    """sm_scale (not None, not a float) as the float the key holds, or _NO_KEY.

    A tensor or array is never keyed: its value can change in place, and reading a CUDA tensor synchronises;
    such calls take the plain path, which reads it each call."""
    if type(sm_scale) is int or isinstance(sm_scale, (np.floating, np.integer)):
        return float(sm_scale)
    return _NO_KEY


def _config_key(config):
    """A config (not None) as a hashable key: a dict by its items and their types, a typed config (frozen
    dataclass) by value; anything else (a mutable triton.Config, say) gives _NO_KEY."""
    if type(config) is dict:
        key = ("dict",) + tuple((k, type(v), v) for k, v in config.items())
    elif isinstance(config, KernelConfig):
        key = config
    else:
        return _NO_KEY
    try:
        hash(key)
    except TypeError:
        return _NO_KEY
    return key


class PlainPlans:
    """The plain path's plans: ``sparse_mla_decode`` without ``plan=`` replays the plan of an earlier, matching call.

    A call matches an earlier one when these are equal (the key): impl and config (as given), sm_scale's value
    (None or a Python/numpy scalar; a tensor sm_scale is never cached), the combine launch in force
    (``combine_launch``), and per user input None or its shape, strides, dtype, device and whether its data_ptr is
    16-byte aligned (a plan compiles for the alignment it saw), for each cache whether its storage holds its whole
    pages (what validation checks beyond shape and strides), and on a GPU the current CUDA stream of q's device
    (a plan's split scratch is shared by its calls: calls on two streams get two plans). The key holds no
    tensor, so the cache keeps none of the caller's tensors alive. The first call of a kind makes the plan
    (``plan.make_plan(..., output_slots=True)``: validation, kernel choice, split planning, scratch; on a GPU the
    autotuner's choice, resolved as ``plan_decode`` does) and runs it; later ones compute the key and replay.
    Every call returns a new out and lse (``DecodePlan.fresh_call``); only the split scratch is the plan's.

    Calls that take the plain path instead (``bypassed`` counts them by reason): impl="reference"; a tensor or
    array sm_scale, or a config that is neither a dict nor a typed config; a call inside ``capture_launches`` (so
    it records the launchers' launches); q, indices or extra_indices with stride(-1) != 1 (the plain path copies
    them); a GPU call while the current stream is capturing a CUDA graph (the graph then owns its scratch, as
    before: a cached plan's scratch would be shared with eager calls and other graphs) or while another device is
    current; CPU tensors when not interpreting; and calls whose plan was refused (any error making it but
    running out of memory: invalid arguments, inputs a fused launch cannot tell apart by pointer, a launcher's
    temporary; remembered per key, so the plain path runs those calls without trying again).

    ``capacity`` plans are kept (least recently used dropped first); ``enabled = False`` turns the cache off
    (WORKBENCH_PLAIN_PLANS=0 in the environment at import does too); ``clear()`` drops every plan and zeroes the
    counters; ``stats()`` reads them. Thread-safe: the table and counters are under a lock, plans are made outside
    it (two threads missing one key at once both make one; the later replaces the earlier).
    """

    def __init__(self, capacity: int = PLAIN_PLANS_MAX, enabled: bool = True):
        self.capacity = capacity
        self.enabled = enabled
        self._lock = threading.Lock()
        self._plans: dict = {}  # key -> [plan or _UNPLANNABLE, last use (a stamp of _clock)]
        self._clock = 0
        self.hits = 0
        self.misses = 0
        self.bypassed: Counter = Counter()
        self.last_refusal: str | None = None  # why the latest refused plan could not be made

    def clear(self) -> None:
        """Drop every plan and zero the counters."""
        with self._lock:
            self._plans.clear()
            self.hits = self.misses = 0
            self.bypassed = Counter()
            self.last_refusal = None

    def stats(self) -> dict:
        """hits, misses (plans made), bypassed (reason -> calls), size (plans and refusals kept), capacity,
        enabled, last_refusal (the error that refused the latest plan, as text, or None)."""
        with self._lock:
            return dict(hits=self.hits, misses=self.misses, bypassed=dict(self.bypassed), size=len(self._plans),
                        capacity=self.capacity, enabled=self.enabled, last_refusal=self.last_refusal)

    def plans(self) -> list:
        """The cached plans, least recently used first (refused keys left out)."""
        with self._lock:
            return [p for p, _ in sorted(self._plans.values(), key=lambda e: e[1]) if p is not _UNPLANNABLE]

    def _bypass(self, reason: str) -> None:
        with self._lock:
            self.bypassed[reason] += 1
        return None

    def call(self, q, cache, indices, sm_scale, attn_sink, topk_length, extra_cache, extra_indices,
             extra_topk_length, impl, config):
        """(out, lse) through a cached (or new) plan, or None: the caller then takes the plain path."""
        if impl == "reference" or type(impl) is not str:
            return self._bypass("impl")
        if _CAPTURE.stack:  # a capture_launches block records the launchers' launches: never replay under it
            return self._bypass("capture_launches")
        if sm_scale is not None and type(sm_scale) is not float:
            sm_scale = _scale_key(sm_scale)
            if sm_scale is _NO_KEY:
                return self._bypass("sm_scale")
        if config is not None:
            config_key = _config_key(config)
            if config_key is _NO_KEY:
                return self._bypass("config")
        else:
            config_key = None
        inputs = (q, cache, indices, topk_length, attn_sink, extra_cache, extra_indices, extra_topk_length)
        try:  # the key, written out for speed (this is every call's cost): see the class docstring for what it holds
            dev = q.get_device()
            if dev >= 0:  # a GPU
                if _capturing():
                    return self._bypass("graph capture")
                if _current_device() != dev:
                    return self._bypass("current device")
                stream = _raw_stream(dev)
            elif INTERPRET:
                stream = None
            else:
                return self._bypass("not runnable")
            p0, p1, p2 = q.data_ptr(), cache.data_ptr(), indices.data_ptr()
            ptrs = [p0, p1, p2, 0, 0, 0, 0, 0]
            shape, stride = cache.shape, cache.stride()
            key = (impl, config_key, sm_scale, _PDL_OVERRIDE.get(), stream,
                   q.shape, q.stride(), q.dtype, q.device,
                   shape, stride, cache.dtype, cache.device,
                   cache.untyped_storage().nbytes() - cache.storage_offset() >= shape[0] * stride[0],  # whole pages
                   indices.shape, indices.stride(), indices.dtype, indices.device)
            ored = p0 | p1 | p2
            if (attn_sink is None and topk_length is None and extra_cache is None and extra_indices is None
                    and extra_topk_length is None):
                optional = None
            else:
                optional = []
                for i in 3, 4, 5, 6, 7:
                    t = inputs[i]
                    if t is None:
                        optional.append(None)
                    else:
                        ptrs[i] = ptr = t.data_ptr()
                        ored |= ptr
                        optional.append((t.shape, t.stride(), t.dtype, t.device))
                if extra_cache is not None:
                    shape, stride = extra_cache.shape, extra_cache.stride()
                    optional.append(extra_cache.untyped_storage().nbytes() - extra_cache.storage_offset()
                                    >= shape[0] * stride[0])
                optional = tuple(optional)
            # alignment: True when every pointer is aligned (the usual case, one test), else one flag per input
            aligned = True if not ored & _ALIGN_MASK else tuple(not p & _ALIGN_MASK for p in ptrs)
            key = (key, optional, aligned)
        except (AttributeError, TypeError, IndexError, RuntimeError):  # not tensors, or not of a cache's rank
            return self._bypass("inputs")
        lock = self._lock
        lock.acquire()
        try:
            entry = self._plans.get(key)
            if entry is None:
                plan = None
            else:
                plan = entry[0]
                self._clock += 1
                entry[1] = self._clock  # most recently used (a stamp: no second hash of the key to reorder)
                if plan is _UNPLANNABLE:
                    self.bypassed["refused"] += 1
                    return None
                if registry.REGISTRY.get(plan.impl) is plan._spec:
                    self.hits += 1
                else:  # its kernel was unregistered or replaced since: plan again
                    plan = None
        finally:
            lock.release()
        if plan is None:
            return self._miss(key, inputs, ptrs, sm_scale, impl, config, stream)
        return plan.fresh_call(inputs, ptrs, stream)

    def _miss(self, key, inputs, ptrs, sm_scale, impl, config, stream):
        for name in ROW_INPUTS:
            t = inputs[INPUT_NAMES.index(name)]
            if t is not None and t.stride(-1) != 1:
                return self._bypass("row stride")
        if _PLAN_MAKER is None:
            return self._bypass("no plan module")
        try:
            plan = _PLAN_MAKER(dict(zip(INPUT_NAMES, inputs)), sm_scale=sm_scale, impl=impl, config=config,
                               output_slots=True)
        except torch.OutOfMemoryError:  # perhaps not next time: not remembered
            return self._bypass("plan failed")
        except Exception as e:  # noqa: BLE001  refused (invalid arguments, launches a plan cannot bind): remembered;
            self._insert(key, _UNPLANNABLE)  # the plain path runs the call, and raises what it raises
            self.last_refusal = f"{type(e).__name__}: {e}"
            return self._bypass("refused")
        with self._lock:
            self.misses += 1
        self._insert(key, plan)
        return plan.fresh_call(inputs, ptrs, stream)

    def _insert(self, key, plan) -> None:
        with self._lock:
            self._clock += 1
            self._plans[key] = [plan, self._clock]
            while len(self._plans) > max(0, self.capacity):  # drop the least recently used
                del self._plans[min(self._plans, key=lambda k: self._plans[k][1])]


PLAIN_PLANS = PlainPlans(enabled=os.environ.get("WORKBENCH_PLAIN_PLANS", "1") != "0")


def warmup(cases, impl: str = "auto") -> int:
    """Run every case once so each autotune key a server will see is tuned before CUDA graph capture.

    cases: iterable of :class:`workbench.format.cases.DecodeCase` (or dicts of decode keyword arguments).
    Returns the number of calls made. With a fixed ``config`` no warmup is needed at all.
    Each call also leaves its plan in ``PLAIN_PLANS`` (for eager calls on this stream; calls made while a CUDA
    graph is captured take the plain path, whose autotuners this warmup has tuned).
    """
    n = 0
    for case in cases:
        kw = case if isinstance(case, dict) else case.kwargs()
        sparse_mla_decode(**kw, impl=impl)
        n += 1
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return n
