"""Combine kernel: merge per-split partial outputs, apply the sink, write bf16 out and lse.

One program per (query, head). Splits whose base-2 LSE is -inf (empty, or with
no valid token) carry no weight and their partial output is never read; a NaN LSE (NaN in the
split's scores) makes the query's out and lse NaN.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .common import INTERPRET, launch, next_pow2, sink_args, to_bf16
from .tuning import call_args

COMBINE_CONFIGS = [triton.Config({}, num_warps=w) for w in (1, 2, 4)]
S_CHUNK_MAX = 8  # splits read at once: 8 x 512 fp32 is 128 registers a thread at one warp


def prune_combine_configs(configs, named_args, **kwargs):
    """One warp holds 512 fp32 lanes in 16 registers each; many warps only pay off with many splits."""
    s_total = call_args(named_args, kwargs).get("s_total", 1)
    kept = [c for c in configs if c.num_warps <= max(1, min(4, s_total))]
    return kept or configs[:1]


@triton.autotune(configs=COMBINE_CONFIGS, key=["H", "S_BUCKET"],
                 prune_configs_by={"early_config_prune": prune_combine_configs},
                 do_bench=lambda fn, quantiles: triton.testing.do_bench(fn, warmup=3, rep=15, quantiles=quantiles))
@triton.jit(do_not_specialize=["stride_sink", "H", "S_Q", "s_total", "S_BUCKET"])
def combine_kernel(
    part_out_ptr,   # [b*s_q, h, s_total, D] fp32
    part_lse_ptr,   # [b*s_q, h, s_total] fp32, base 2
    sink_ptr, stride_sink,  # [h] fp32, any stride (read only when HAS_SINK)
    out_ptr,        # [b, s_q, h, D] bf16, contiguous
    lse_ptr,        # [b, h, s_q] fp32, contiguous
    H, S_Q, s_total, S_BUCKET,
    HAS_SINK: tl.constexpr, D: tl.constexpr, S_PAD: tl.constexpr, S_CHUNK: tl.constexpr,
    RNE_BY_HAND: tl.constexpr, PDL: tl.constexpr,
):
    pid_q = tl.program_id(0)
    head = tl.program_id(1)
    row = pid_q * H + head
    if PDL:  # launched as a programmatic dependent of the last partial: its writes are visible after this
        tl.extra.cuda.gdc_wait()
    sp = tl.arange(0, S_PAD)
    d = tl.arange(0, D)
    # each partial row is read once: evict_first hands back the lines rung 15 stored evict_last (store_half's KEEP)
    lse_s = tl.load(part_lse_ptr + row * s_total + sp, mask=sp < s_total, other=float("-inf"),
                    eviction_policy="evict_first")  # [S_PAD]
    # S_CHUNK splits' rows are loaded at once, and the first chunk's in the same round as the LSEs: a split at a
    # time, each program waited out s_total load latencies in a row (torch.profiler, exploratory H200 run, chunk 1
    # -> 4: b64 h16 3.23 -> 3.07 us, b1 h64 topk512 2.69 -> 2.27 us; b64 h64 5.06 -> 5.28, within that run's
    # spread), and a chunk masked by its LSEs waited for them. An empty split's row (LSE -inf: its partial may
    # never have been written) is read but selected away, never multiplied
    s = tl.arange(0, S_CHUNK)
    part = tl.load(part_out_ptr + (row * s_total + s).to(tl.int64)[:, None] * D + d[None, :],
                   mask=(s < s_total)[:, None], other=0.0, eviction_policy="evict_first")  # [S_CHUNK, D]
    # tl.max skips NaN: a NaN split (NaN in its scores) would leave m finite or -inf (empty); make it poison all
    m = tl.where(tl.sum((lse_s != lse_s).to(tl.int32), 0) > 0, float("nan"), tl.max(lse_s, 0))
    m_use = tl.where(m == float("-inf"), 0.0, m)
    w_sum = tl.sum(tl.exp2(lse_s - m_use), 0)
    acc = tl.zeros([D], tl.float32)
    for s0 in range(0, s_total, S_CHUNK):
        s = s0 + tl.arange(0, S_CHUNK)
        if s0 > 0:
            part = tl.load(part_out_ptr + (row * s_total + s).to(tl.int64)[:, None] * D + d[None, :],
                           mask=(s < s_total)[:, None], other=0.0, eviction_policy="evict_first")  # [S_CHUNK, D]
        lse_c = tl.load(part_lse_ptr + row * s_total + s, mask=s < s_total, other=float("-inf"))  # [S_CHUNK]
        w = tl.exp2(lse_c - m_use)
        acc += tl.sum(tl.where((lse_c > float("-inf"))[:, None], w[:, None] * part, 0.0), 0)
    empty = m == float("-inf")
    lse = tl.where(empty, float("inf"), (m_use + tl.log2(tl.where(empty, 1.0, w_sum))) * 0.6931471805599453)
    out = tl.where(empty, 0.0, acc / tl.where(empty, 1.0, w_sum))
    if HAS_SINK:
        sink = tl.load(sink_ptr + head * stride_sink)
        # 1/(1+exp(sink-lse)); guarded because sink=+inf with lse=+inf is NaN
        out = tl.where(empty, 0.0, out * (1.0 / (1.0 + tl.exp(sink - lse))))
    bi = pid_q // S_Q
    si = pid_q % S_Q
    tl.store(out_ptr + row.to(tl.int64) * D + d, to_bf16(out, RNE_BY_HAND))
    tl.store(lse_ptr + (bi * H + head) * S_Q + si, lse)


def launch_combine(*, part_out, part_lse, attn_sink, out, lse, pinned: bool = False, pdl: bool = False):
    """Merge splits into out [b, s_q, h, D] bf16 and lse [b, h, s_q] fp32 (both preallocated).

    pdl: launch as a programmatic dependent launch (sm_90+): the kernel may start before the partial launch
    ahead of it in the stream has finished, and waits for it before reading the partials.
    """
    b, s_q, h, d = out.shape
    s_total = part_lse.shape[-1]
    args = dict(part_out_ptr=part_out, part_lse_ptr=part_lse, **sink_args(attn_sink, part_lse), out_ptr=out, lse_ptr=lse,
                H=h, S_Q=s_q, s_total=s_total, S_BUCKET=next_pow2(s_total),
                HAS_SINK=attn_sink is not None, D=d, S_PAD=next_pow2(s_total),
                S_CHUNK=min(S_CHUNK_MAX, next_pow2(s_total)), RNE_BY_HAND=INTERPRET, PDL=pdl, launch_pdl=pdl)
    grid = (b * s_q, h)
    if pinned:
        launch(combine_kernel.fn, grid, dict(**args, num_warps=COMBINE_CONFIGS[0].num_warps))
    else:
        launch(combine_kernel, grid, args)
