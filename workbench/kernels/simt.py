"""Per-head SIMT baseline: one program per (query, head), fp32 throughout, tl.sum reductions.

Every head re-reads and re-dequantises the same KV bytes. That H-fold
redundancy is the point of this kernel: it is the "before" picture, so it is
deliberately not optimised.
"""
from __future__ import annotations

import triton
import triton.language as tl

from ..format.layout import layout_of
from .common import (INTERPRET, LOG2E, gather_kv_tile, launch, layout_constexprs, next_pow2, scope_args, sink_args,
                     to_bf16)
from .configs import SimtConfig
from .tuning import call_args, current_target, record_prune

ALLOWED = dict(BLOCK_T=(16, 32, 64), num_warps=(2, 4, 8), num_stages=(1,))
CONFIG_SPACE = [SimtConfig(BLOCK_T=bt, num_warps=w, num_stages=1)
                for bt in ALLOWED["BLOCK_T"] for w in ALLOWED["num_warps"]]


def estimate_simt_shared_bytes(BLOCK_T: int, num_warps: int, num_stages: int = 1) -> int:
    """Only the cross-warp reductions of tl.sum use shared memory: one fp32 per lane row."""
    return 4 * BLOCK_T * num_warps


def prune_simt_configs(configs, named_args, **kwargs):
    """Tiles longer than the selection only add masked work."""
    target = current_target()
    topk = call_args(named_args, kwargs).get("TOPK_BUCKET", 1 << 30)
    kept = []
    for c in configs:
        est = estimate_simt_shared_bytes(c.kwargs["BLOCK_T"], c.num_warps)
        reason = None
        if est > target.smem_per_block:
            reason = f"shared memory ~{est} B > {target.smem_per_block} B"
        elif c.kwargs["BLOCK_T"] > max(16, topk):
            reason = f"BLOCK_T={c.kwargs['BLOCK_T']} exceeds topk bucket {topk}"
        if record_prune("simt", target, c, est, reason):
            kept.append(c)
    return kept or configs[:1]


@triton.jit
def _simt_scope(m_i, l_i, acc_nope, acc_rope, q_nope, q_rope, sm_scale_log2, bi, si,
                cache_f8, cache_u8, cache_bf16, stride_page, block_size, num_tokens,
                idx_ptr, stride_ib, stride_is, topk_len_ptr, stride_tl, TOPK,
                HAS_TOPK_LEN: tl.constexpr, D_NOPE: tl.constexpr, NOPE_PAD: tl.constexpr, D_ROPE: tl.constexpr,
                TILE: tl.constexpr, NUM_TILES: tl.constexpr, DATA_BYTES: tl.constexpr, SCALE_BYTES: tl.constexpr,
                BLOCK_T: tl.constexpr):
    """Online softmax of one head over one KV scope; returns the updated state."""
    end = TOPK
    if HAS_TOPK_LEN:
        end = tl.minimum(tl.load(topk_len_ptr + bi * stride_tl), TOPK)
    idx_row = idx_ptr + bi * stride_ib + si * stride_is
    for t0 in range(0, end, BLOCK_T):
        offs = t0 + tl.arange(0, BLOCK_T)
        tmask = offs < end
        idx = tl.load(idx_row + offs, mask=tmask, other=-1)
        valid = tmask & (idx >= 0) & (idx < num_tokens)
        k_nope, k_rope = gather_kv_tile(cache_f8, cache_u8, cache_bf16, idx, valid, stride_page, block_size,
                                        D_NOPE, NOPE_PAD, D_ROPE, TILE, NUM_TILES, DATA_BYTES, SCALE_BYTES, BLOCK_T)
        s = tl.sum(k_nope * q_nope[None, :], 1) + tl.sum(k_rope * q_rope[None, :], 1)  # [BLOCK_T]
        s = tl.where(valid, s * sm_scale_log2, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 0))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_use)
        p = tl.exp2(s - m_use)
        l_i = l_i * alpha + tl.sum(p, 0)
        acc_nope = acc_nope * alpha + tl.sum(p[:, None] * k_nope, 0)
        acc_rope = acc_rope * alpha + tl.sum(p[:, None] * k_rope, 0)
        m_i = m_new
    return m_i, l_i, acc_nope, acc_rope


@triton.autotune(configs=[c.to_triton() for c in CONFIG_SPACE], key=["H", "TOPK_BUCKET"],
                 prune_configs_by={"early_config_prune": prune_simt_configs},
                 do_bench=lambda fn, quantiles: triton.testing.do_bench(fn, warmup=3, rep=15, quantiles=quantiles))
@triton.jit(do_not_specialize=["stride_qb", "stride_qs", "num_tokens", "stride_ib", "stride_is", "stride_tl", "TOPK",
                               "x_num_tokens", "x_stride_ib", "x_stride_is", "x_stride_tl", "X_TOPK", "stride_sink",
                               "H", "S_Q", "TOPK_BUCKET"])
def simt_kernel(
    q_ptr,            # [b, s_q, h, 512] bf16, last stride 1
    stride_qb, stride_qs, stride_qh,
    cache_f8, cache_u8, cache_bf16, stride_page, block_size, num_tokens,
    idx_ptr, stride_ib, stride_is, topk_len_ptr, stride_tl, TOPK,  # [b, s_q, topk] int32, [b] int32 (any stride)
    x_cache_f8, x_cache_u8, x_cache_bf16, x_stride_page, x_block_size, x_num_tokens,
    x_idx_ptr, x_stride_ib, x_stride_is, x_topk_len_ptr, x_stride_tl, X_TOPK,  # the extra scope, same shapes
    sink_ptr, stride_sink,  # [h] fp32, any stride
    out_ptr,          # [b, s_q, h, 512] bf16, contiguous
    lse_ptr,          # [b, h, s_q] fp32, contiguous
    sm_scale_log2, H, S_Q, TOPK_BUCKET,
    HAS_TOPK_LEN: tl.constexpr, HAS_EXTRA: tl.constexpr, X_HAS_TOPK_LEN: tl.constexpr, HAS_SINK: tl.constexpr,
    RNE_BY_HAND: tl.constexpr, D_NOPE: tl.constexpr, NOPE_PAD: tl.constexpr, D_ROPE: tl.constexpr, TILE: tl.constexpr,
    NUM_TILES: tl.constexpr, DATA_BYTES: tl.constexpr, SCALE_BYTES: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    pid_q = tl.program_id(0)
    head = tl.program_id(1)
    bi = pid_q // S_Q
    si = pid_q % S_Q
    d = tl.arange(0, NOPE_PAD)
    r = tl.arange(0, D_ROPE)
    q_row = q_ptr + bi * stride_qb + si * stride_qs + head * stride_qh
    q_nope = tl.load(q_row + d, mask=d < D_NOPE, other=0.0).to(tl.float32)  # [NOPE_PAD]
    q_rope = tl.load(q_row + D_NOPE + r).to(tl.float32)  # [D_ROPE]

    m_i = tl.full([], float("-inf"), tl.float32)
    l_i = tl.zeros([], tl.float32)
    acc_nope = tl.zeros([NOPE_PAD], tl.float32)
    acc_rope = tl.zeros([D_ROPE], tl.float32)
    m_i, l_i, acc_nope, acc_rope = _simt_scope(
        m_i, l_i, acc_nope, acc_rope, q_nope, q_rope, sm_scale_log2, bi, si,
        cache_f8, cache_u8, cache_bf16, stride_page, block_size, num_tokens,
        idx_ptr, stride_ib, stride_is, topk_len_ptr, stride_tl, TOPK, HAS_TOPK_LEN,
        D_NOPE, NOPE_PAD, D_ROPE, TILE, NUM_TILES, DATA_BYTES, SCALE_BYTES, BLOCK_T)
    if HAS_EXTRA:
        m_i, l_i, acc_nope, acc_rope = _simt_scope(
            m_i, l_i, acc_nope, acc_rope, q_nope, q_rope, sm_scale_log2, bi, si,
            x_cache_f8, x_cache_u8, x_cache_bf16, x_stride_page, x_block_size, x_num_tokens,
            x_idx_ptr, x_stride_ib, x_stride_is, x_topk_len_ptr, x_stride_tl, X_TOPK, X_HAS_TOPK_LEN,
            D_NOPE, NOPE_PAD, D_ROPE, TILE, NUM_TILES, DATA_BYTES, SCALE_BYTES, BLOCK_T)

    empty = l_i == 0.0
    inv_l = tl.where(empty, 0.0, 1.0 / tl.where(empty, 1.0, l_i))
    lse = tl.where(empty, float("inf"), (m_i + tl.log2(tl.where(empty, 1.0, l_i))) * 0.6931471805599453)
    gate = inv_l
    if HAS_SINK:
        sink = tl.load(sink_ptr + head * stride_sink)
        gate = tl.where(empty, 0.0, inv_l / (1.0 + tl.exp(sink - lse)))
    out_row = out_ptr + (pid_q * H + head).to(tl.int64) * (D_NOPE + D_ROPE)
    tl.store(out_row + d, to_bf16(acc_nope * gate, RNE_BY_HAND), mask=d < D_NOPE)
    tl.store(out_row + D_NOPE + r, to_bf16(acc_rope * gate, RNE_BY_HAND))
    tl.store(lse_ptr + (bi * H + head) * S_Q + si, lse)


INTERPRETER_CONFIG = SimtConfig(BLOCK_T=64, num_warps=4, num_stages=1)


def check_simt_config(config) -> SimtConfig:
    """A user's forced config (dict, triton.Config or SimtConfig), validated; ValueError names the problem."""
    return SimtConfig.from_any(config, ALLOWED, "simt")


def launch_simt(*, q, cache, indices, topk_length, extra_cache, extra_indices, extra_topk_length,
                attn_sink, sm_scale, out, lse, config=None):
    """Run the per-head baseline into preallocated out [b, s_q, h, 512] bf16 and lse [b, h, s_q] fp32."""
    b, s_q, h, _ = q.shape
    has_extra = extra_cache is not None
    topk = indices.shape[2]
    args = dict(q_ptr=q, stride_qb=q.stride(0), stride_qs=q.stride(1), stride_qh=q.stride(2),
                **scope_args("", cache, indices, topk_length), TOPK=topk,
                **scope_args("x_", extra_cache if has_extra else cache, extra_indices if has_extra else indices,
                              extra_topk_length if has_extra else None),
                X_TOPK=extra_indices.shape[2] if has_extra else 0,
                **sink_args(attn_sink, lse), out_ptr=out, lse_ptr=lse,
                sm_scale_log2=sm_scale * LOG2E, H=h, S_Q=s_q,
                TOPK_BUCKET=next_pow2(topk + (extra_indices.shape[2] if has_extra else 0)),
                HAS_TOPK_LEN=topk_length is not None, HAS_EXTRA=has_extra,
                X_HAS_TOPK_LEN=has_extra and extra_topk_length is not None, HAS_SINK=attn_sink is not None,
                RNE_BY_HAND=INTERPRET, **layout_constexprs(layout_of(cache)))
    grid = (b * s_q, h)
    if INTERPRET and config is None:
        config = INTERPRETER_CONFIG
    if config is None:
        launch(simt_kernel, grid, args)
        return
    cfg = check_simt_config(config)
    launch(simt_kernel.fn, grid, dict(**args, **cfg.meta(), num_warps=cfg.num_warps, num_stages=cfg.num_stages))
