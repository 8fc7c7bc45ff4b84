"""Head-batched MMA decode kernel: one program per (query, BLOCK_H heads, split).

Each tile of BLOCK_T selected tokens is gathered and dequantised once and shared
by every head of the group through tl.dot, for QK (nope 512-padded + rope 64)
and PV. Each split writes an fp32 partial output and a base-2 LSE; the combine
kernel merges them.
"""
from __future__ import annotations

import triton
import triton.language as tl

from ..format.layout import layout_of
from .common import (D_ROPE, INTERPRET, NOPE_PAD, cdiv, dequant_kv, head_group, launch, layout_constexprs,
                     load_kv_raw, mma, partial_args, to_bf16)
from .configs import TiledConfig
from .tuning import call_args, current_target, record_prune

ALLOWED = dict(BLOCK_H=(16, 32, 64), BLOCK_T=(16, 32, 64), num_warps=(4, 8), num_stages=(1, 2), PREFETCH=(0, 1))
# A forced config that leaves PREFETCH out gets this. On the H200 prefetching the next tile helps
# BLOCK_H=16 (113 vs 158 us) and hurts BLOCK_H=64 (350 vs 209 us), so the autotuner chooses it.
DEFAULT_PREFETCH = 1
MMA_CONFIG_SPACE = [
    triton.Config({"BLOCK_H": bh, "BLOCK_T": bt, "PREFETCH": pf}, num_warps=w, num_stages=s)
    for bh in ALLOWED["BLOCK_H"] for bt in ALLOWED["BLOCK_T"]
    for w in ALLOWED["num_warps"] for s in ALLOWED["num_stages"] for pf in ALLOWED["PREFETCH"]
]
# What the autotuner times. Tuning the whole space cost ~3 min per key on the H200 (run of
# 2026-11-30), so num_stages=2 (the same cubin as 1 for several configs, resource lab) and
# BLOCK_T=64 (heavy spills at BLOCK_H=16, 144 KB of shared memory at BLOCK_H=64) are left out;
# config= still reaches them.
MMA_CONFIGS = [c for c in MMA_CONFIG_SPACE if c.num_stages == 1 and c.kwargs["BLOCK_T"] <= 32]
MAX_ACC_REGS = 160  # accumulator registers per thread past which the kernel always spills (resource lab)


def accumulator_registers(BLOCK_H: int, num_warps: int) -> int:
    """fp32 registers per thread held by the [BLOCK_H, 512+64] output accumulator alone."""
    return BLOCK_H * (NOPE_PAD + D_ROPE) // (32 * num_warps)


def estimate_mma_shared_bytes(BLOCK_H: int, BLOCK_T: int, num_warps: int, num_stages: int,
                               PREFETCH: int = DEFAULT_PREFETCH) -> int:
    """Shared-memory model, fitted to what Triton 3.6 compiles (the resource lab's tables).

    Main loop: the bf16 q tile (nope + rope, 1152 B per head) and the bf16 K tile (1024 B per
    token; 1152 with its rope part at BLOCK_H=64, where the dots are wgmma; 768 for 64-token tiles
    on 4 warps without prefetch, a layout Triton picks there). Prefetching adds the
    rope tile and P ((128 + 2*BLOCK_H) B per token); without it each extra stage buffers the indices
    and rope (132 B per token), or the whole fp8 tile at BLOCK_H=64 (644 B on sm_90, up to 781 B
    on sm_100, whose tcgen05 path also keeps ~512 B of barriers; the model takes 784 and 512).
    The epilogue converts the [BLOCK_H, 512] fp32 accumulator through shared memory at BLOCK_H=64
    (2048 B per head).
    Checked against every compiled config on sm_90, sm_120, sm_100 and sm_89: never below the
    compiled number, at most 66 KB above it, never on the wrong side of a per-block limit (notebook 03).
    """
    wide = BLOCK_H >= 64
    k_per_token = 1152 if wide else (768 if BLOCK_T >= 64 and num_warps == 4 and not PREFETCH else 1024)
    loop = 1152 * BLOCK_H + k_per_token * BLOCK_T + (512 if wide else 0)  # + tcgen05 barriers on sm_100
    if PREFETCH:
        loop += (128 + 2 * BLOCK_H) * BLOCK_T
    else:
        loop += (num_stages - 1) * (784 if wide else 132) * BLOCK_T
    return max(loop, 2048 * BLOCK_H if wide else 0)


def mma_prune_reason(cfg: triton.Config, heads: int, target) -> tuple[int, str | None]:
    """(estimated shared bytes, reason to prune or None) for one config."""
    kw = cfg.kwargs
    est = estimate_mma_shared_bytes(kw["BLOCK_H"], kw["BLOCK_T"], cfg.num_warps, cfg.num_stages,
                                    kw.get("PREFETCH", DEFAULT_PREFETCH))
    if est > target.smem_per_block:
        return est, f"shared memory ~{est} B > {target.smem_per_block} B per block on {target.arch}"
    acc = accumulator_registers(kw["BLOCK_H"], cfg.num_warps)
    if heads and acc > MAX_ACC_REGS:
        return est, f"accumulator alone needs {acc} registers per thread (> {MAX_ACC_REGS}): spills"
    return est, None


def prune_mma_configs(configs, named_args, **kwargs):
    """Drop configs the target cannot hold before any of them is compiled, recording why.

    Then keep one head-group size: the largest BLOCK_H that fits and does not exceed the heads
    (more rows than heads is wasted MMA work; a smaller group re-reads each KV tile once per group).
    """
    target = current_target()
    heads = call_args(named_args, kwargs).get("H", 0)
    verdicts = [(c, *mma_prune_reason(c, heads, target)) for c in configs]
    fitting = [c for c, _, reason in verdicts if reason is None]
    if not fitting:
        for c, est, reason in verdicts:
            record_prune("mma", target, c, est, reason)
        raise ValueError(f"no MMA config fits {target.arch} for {heads} heads")
    want = head_group(heads)
    group = max((c.kwargs["BLOCK_H"] for c in fitting if c.kwargs["BLOCK_H"] <= want),
                default=min(c.kwargs["BLOCK_H"] for c in fitting))
    kept = []
    for c, est, reason in verdicts:
        if reason is None and c.kwargs["BLOCK_H"] != group:
            reason = f"BLOCK_H={c.kwargs['BLOCK_H']}: the head group for {heads} heads on {target.arch} is {group}"
        if record_prune("mma", target, c, est, reason):
            kept.append(c)
    return kept


@triton.autotune(configs=MMA_CONFIGS, key=["H", "TOKENS_BUCKET", "QUERIES_BUCKET"],
                 prune_configs_by={"early_config_prune": prune_mma_configs},
                 do_bench=lambda fn, quantiles: triton.testing.do_bench(fn, warmup=3, rep=15, quantiles=quantiles))
@triton.jit(do_not_specialize=["stride_qb", "stride_qs", "num_tokens", "stride_ib", "stride_is", "stride_tl", "H", "S_Q", "TOPK",
                               "split_offset", "s_total", "TOKENS_BUCKET", "QUERIES_BUCKET"])
def mma_partial_kernel(
    q_ptr,            # [b, s_q, h, 512] bf16, last stride 1
    stride_qb, stride_qs, stride_qh,
    cache_f8, cache_u8, cache_bf16,  # flat views of one cache
    stride_page, block_size, num_tokens,
    idx_ptr,          # [b, s_q, topk] int32
    stride_ib, stride_is,
    topk_len_ptr, stride_tl,  # [b] int32, any stride (read only when HAS_TOPK_LEN)
    part_out_ptr,     # [b*s_q, h, s_total, 512] fp32
    part_lse_ptr,     # [b*s_q, h, s_total] fp32, base 2
    sm_scale_log2,
    H, S_Q, TOPK, split_offset, tokens_per_split, s_total,
    TOKENS_BUCKET, QUERIES_BUCKET,
    HAS_TOPK_LEN: tl.constexpr, DOT_FP32: tl.constexpr,
    D_NOPE: tl.constexpr, NOPE_PAD: tl.constexpr, D_ROPE: tl.constexpr, TILE: tl.constexpr,
    NUM_TILES: tl.constexpr, DATA_BYTES: tl.constexpr, SCALE_BYTES: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_T: tl.constexpr, PREFETCH: tl.constexpr,
):
    pid_h = tl.program_id(0)
    split = tl.program_id(1)
    pid_q = tl.program_id(2)
    bi = pid_q // S_Q
    si = pid_q % S_Q

    heads = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    hmask = heads < H
    d = tl.arange(0, NOPE_PAD)
    r = tl.arange(0, D_ROPE)
    q_row = q_ptr + bi * stride_qb + si * stride_qs + heads[:, None] * stride_qh
    q_nope = tl.load(q_row + d[None, :], mask=hmask[:, None] & (d < D_NOPE)[None, :], other=0.0)  # [BLOCK_H, NOPE_PAD]
    q_rope = tl.load(q_row + D_NOPE + r[None, :], mask=hmask[:, None], other=0.0)  # [BLOCK_H, D_ROPE]

    end_all = TOPK
    if HAS_TOPK_LEN:
        end_all = tl.minimum(tl.load(topk_len_ptr + bi * stride_tl), TOPK)
    start = split * tokens_per_split
    end = tl.minimum(start + tokens_per_split, end_all)

    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc_nope = tl.zeros([BLOCK_H, NOPE_PAD], tl.float32)
    acc_rope = tl.zeros([BLOCK_H, D_ROPE], tl.float32)
    idx_row = idx_ptr + bi * stride_ib + si * stride_is
    # software pipeline by hand: indices two tiles ahead, raw bytes one tile ahead, so the
    # gathers of the next tile are in flight while this tile's MMAs run
    offs = start + tl.arange(0, BLOCK_T)
    idx = tl.load(idx_row + offs, mask=offs < end, other=-1)
    valid = (offs < end) & (idx >= 0) & (idx < num_tokens)
    k8, sbyte, rope = load_kv_raw(cache_f8, cache_u8, cache_bf16, idx, valid, stride_page, block_size,
                                  D_NOPE, NOPE_PAD, D_ROPE, NUM_TILES, DATA_BYTES, SCALE_BYTES)
    offs_n = offs + BLOCK_T
    idx_n = tl.load(idx_row + offs_n, mask=offs_n < end, other=-1)
    for t0 in range(start, end, BLOCK_T):
        if PREFETCH:
            cur_k8, cur_sbyte, cur_rope, cur_valid = k8, sbyte, rope, valid
            valid = (offs_n < end) & (idx_n >= 0) & (idx_n < num_tokens)
            k8, sbyte, rope = load_kv_raw(cache_f8, cache_u8, cache_bf16, idx_n, valid, stride_page, block_size,
                                          D_NOPE, NOPE_PAD, D_ROPE, NUM_TILES, DATA_BYTES, SCALE_BYTES)
            offs_n = offs_n + BLOCK_T
            idx_n = tl.load(idx_row + offs_n, mask=offs_n < end, other=-1)
        else:
            offs = t0 + tl.arange(0, BLOCK_T)
            idx = tl.load(idx_row + offs, mask=offs < end, other=-1)
            cur_valid = (offs < end) & (idx >= 0) & (idx < num_tokens)
            cur_k8, cur_sbyte, cur_rope = load_kv_raw(cache_f8, cache_u8, cache_bf16, idx, cur_valid, stride_page,
                                                      block_size, D_NOPE, NOPE_PAD, D_ROPE, NUM_TILES, DATA_BYTES,
                                                      SCALE_BYTES)
        k_nope = dequant_kv(cur_k8, cur_sbyte, TILE, SCALE_BYTES, NOPE_PAD, BLOCK_T).to(tl.bfloat16)  # exact
        k_rope = cur_rope
        if DOT_FP32:
            k_rope = k_rope.to(tl.float32)
        s = mma(q_nope, tl.trans(k_nope), DOT_FP32) + mma(q_rope, tl.trans(k_rope), DOT_FP32)  # [BLOCK_H, BLOCK_T]
        s = tl.where(cur_valid[None, :], s * sm_scale_log2, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # no (-inf) - (-inf)
        alpha = tl.exp2(m_i - m_use)
        p = tl.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        p16 = to_bf16(p, DOT_FP32)
        acc_nope = acc_nope * alpha[:, None] + mma(p16, k_nope, DOT_FP32)
        acc_rope = acc_rope * alpha[:, None] + mma(p16, k_rope, DOT_FP32)
        m_i = m_new

    live = l_i != 0  # a NaN sum is live: written as NaN, never dropped by the combine as an empty split
    inv_l = tl.where(live, 1.0 / l_i, 0.0)
    lse2 = tl.where(live, m_i + tl.log2(l_i), float("-inf"))
    slot = (pid_q * H + heads) * s_total + split_offset + split  # [BLOCK_H]
    tl.store(part_lse_ptr + slot, lse2, mask=hmask)
    out_row = part_out_ptr + slot[:, None].to(tl.int64) * (D_NOPE + D_ROPE)
    # an empty split writes only its -inf LSE; the combine never reads its out
    tl.store(out_row + d[None, :], acc_nope * inv_l[:, None], mask=(hmask & live)[:, None] & (d < D_NOPE)[None, :])
    tl.store(out_row + D_NOPE + r[None, :], acc_rope * inv_l[:, None], mask=(hmask & live)[:, None])


def interpreter_config(heads: int) -> triton.Config:
    """The one config the CPU interpreter runs: big tiles mean few (slow) interpreted programs."""
    return triton.Config({"BLOCK_H": head_group(heads), "BLOCK_T": 64,
                          "PREFETCH": 1}, num_warps=4, num_stages=1)


def check_mma_config(config) -> triton.Config:
    """A user's forced config as a triton.Config; ValueError if unsupported or over the target's shared memory."""
    cfg = TiledConfig.from_any(config, ALLOWED, "mma").to_triton()  # PREFETCH left out: the launcher's default
    target = current_target()
    est, reason = mma_prune_reason(cfg, 0, target)
    if reason:
        raise ValueError(f"config {config}: {reason}")
    return cfg


def launch_mma_partial(*, q, cache, indices, topk_length, part_out, part_lse, split_offset, num_splits,
                       tokens_per_split, sm_scale, config=None):
    """Run the partial kernel for one KV scope into splits [split_offset, split_offset+num_splits)."""
    b, s_q, h, _ = q.shape
    args = dict(**partial_args(q=q, cache=cache, indices=indices, topk_length=topk_length, part_out=part_out,
                               part_lse=part_lse, split_offset=split_offset, tokens_per_split=tokens_per_split,
                               sm_scale=sm_scale), **layout_constexprs(layout_of(cache)))
    if INTERPRET and config is None:
        config = interpreter_config(h)
    if config is None:
        grid = lambda META: (cdiv(h, META["BLOCK_H"]), num_splits, b * s_q)  # noqa: E731
        launch(mma_partial_kernel, grid, args)  # PREFETCH comes from each config
        return
    cfg = config if isinstance(config, triton.Config) else check_mma_config(config)
    meta = {"PREFETCH": DEFAULT_PREFETCH, **cfg.kwargs}
    grid = (cdiv(h, meta["BLOCK_H"]), num_splits, b * s_q)
    launch(mma_partial_kernel.fn, grid, dict(**args, **meta, num_warps=cfg.num_warps, num_stages=cfg.num_stages))
