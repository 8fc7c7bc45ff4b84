"""Ladder rung "tile512": the MMA kernel on one 512-wide token tile, 448 nope + 64 rope.

The seeds' MMA kernel pads nope 448 -> 512 and runs a second 64-wide dot for the rope: 576
columns of dequant and MMA per token, where d_v = 512 = 448 + 64 says the rope can sit in the
padding slot. Here one [BLOCK_T, 512] bf16 tile serves QK (K = 512) and PV (N = 512), and the
q row loads as one contiguous 512-wide row. Columns < 448 come from the fp8 bytes times their
tile's UE8M0 scale; columns >= 448 from the rope's bf16, loaded through a 512-wide bf16 pointer
that is masked to the rope columns, so both loads stay 16 bytes wide.

What it should move (written before measuring): 11% fewer dequant and MMA columns, one dot
instead of two for QK and PV, a [BLOCK_H, 512] accumulator instead of [BLOCK_H, 576]; the
gathers stay synchronous unless num_stages >= 3 (then Triton issues them as cp.async).
"""
from __future__ import annotations

import triton
import triton.language as tl

from ..format.layout import layout_of
from .common import (INTERPRET, cdiv, head_group, launch, layout_constexprs, mma, partial_args, to_bf16,
                     ue8m0_fp32)
from .tuning import call_args, current_target, record_prune
from .configs import TiledConfig, tiled_space

# BLOCK_H x BLOCK_T x warps x stages; num_stages >= 3 turns the gathers into cp.async
ALLOWED = dict(BLOCK_H=(16, 32, 64), BLOCK_T=(16, 32, 64), num_warps=(4, 8), num_stages=(1, 2, 3))
CONFIG_SPACE = tiled_space(ALLOWED)
TUNE_SPACE = [c for c in CONFIG_SPACE if c.BLOCK_T <= 32 and c.num_stages != 2]


def estimate_shared_bytes(c: TiledConfig, arch: str | None = None) -> int:
    """Shared-memory model, fitted to what Triton 3.6 compiles (the resource lab's tables), in bytes.

    Main loop: the bf16 q tile (1024 B per head) and the bf16 K tile: 2048 B per token where the dots
    are mma.sync (sm_89, sm_120, and BLOCK_H < 64 everywhere: the tile and its transposed copy for
    the two dots), 1024 B per token where they take K from shared memory (wgmma on sm_90, tcgen05 on
    sm_100, at BLOCK_H = 64).
    From 2 stages on, the pipelined gathers buffer one tile of raw bytes: 1536 B per token (the 512 fp8
    bytes and the 512-wide masked bf16 rope load, 1024 B); and each stage past the first buffers the
    indices and row offsets (4 B per token).
    sm_100 at BLOCK_H = 64 keeps tcgen05 barriers and staging: 512 B, plus 16 B per token when pipelined
    (the model takes the larger of num_warps 4 and 8).
    sm_90 at BLOCK_H = 64 converts the fp32 [BLOCK_H, 512] accumulator through shared memory in the
    epilogue (2048 B per head), which reuses the loop's space: the larger of the two counts.

    ``arch``: a target name ("sm_90"); None takes the largest over every target. Checked against every
    compiled config (num_stages 1-3) on sm_90, sm_100, sm_120 and sm_89: never below the compiled number,
    exact on sm_90, sm_120 and sm_89, at most 1.5 KB above on sm_100, never on the wrong side of a
    per-block limit (tests/test_resources.py).
    """
    if arch is None:
        from ..lab.targets import TARGETS
        return max(estimate_shared_bytes(c, a) for a in TARGETS)
    from ..lab.targets import get_target
    cap = get_target(arch).capability
    wide = c.BLOCK_H >= 64
    smem_operands = wide and cap in (90, 100)
    loop = 1024 * c.BLOCK_H + (1024 if smem_operands else 2048) * c.BLOCK_T
    if c.num_stages >= 2:
        loop += 1536 * c.BLOCK_T + 4 * (c.num_stages - 1) * c.BLOCK_T
    if wide and cap == 100:
        loop += 512 + (16 * c.BLOCK_T if c.num_stages >= 2 else 0)
    if wide and cap == 90:
        loop = max(loop, 2048 * c.BLOCK_H)
    return loop


def prune_reason(c: TiledConfig, heads: int, target) -> tuple[int, str | None]:
    """(estimated shared bytes on ``target``, reason to prune or None)."""
    est = estimate_shared_bytes(c, target.arch)
    if est > target.smem_per_block:
        return est, f"shared memory ~{est} B > {target.smem_per_block} B per block on {target.arch}"
    if c.BLOCK_H * 512 // (32 * c.num_warps) > 128:
        return est, f"the [{c.BLOCK_H}, 512] accumulator alone needs > 128 registers per thread"
    return est, None


def prune_configs(configs, named_args, **kwargs):
    """Keep the configs that fit, at one head group: the largest BLOCK_H <= the heads (min 16)."""
    heads = int(call_args(named_args, kwargs).get("H", 0) or 0)
    target = current_target()
    verdicts = [(c, *prune_reason(TiledConfig.from_triton(c), heads, target)) for c in configs]
    fitting = [c for c, _, r in verdicts if r is None]
    want = head_group(heads)
    group = max((c.kwargs["BLOCK_H"] for c in fitting if c.kwargs["BLOCK_H"] <= want),
                default=min((c.kwargs["BLOCK_H"] for c in fitting), default=16))
    kept = []
    for c, est, reason in verdicts:
        if reason is None and c.kwargs["BLOCK_H"] != group:
            reason = f"BLOCK_H={c.kwargs['BLOCK_H']}: the head group for {heads} heads on {target.arch} is {group}"
        if record_prune("tile512", target, c, est, reason):
            kept.append(c)
    if not kept:
        raise ValueError(f"no tile512 config fits {target.arch} for {heads} heads")
    return kept


@triton.jit
def dequant_fp32(k8, sbyte, BLOCK_T: tl.constexpr, SCALE_BYTES: tl.constexpr, TILE: tl.constexpr, D: tl.constexpr):
    """[BLOCK_T, D] bf16: fp8 -> fp32 (hardware conversion) times 2**(e-127), rounded to bf16 (exact)."""
    scale = ue8m0_fp32(sbyte)  # UE8M0 byte e -> 2**(e-127)
    scale = tl.reshape(tl.broadcast_to(scale[:, :, None], (BLOCK_T, SCALE_BYTES, TILE)), (BLOCK_T, D))
    return (k8.to(tl.float32) * scale).to(tl.bfloat16)


@triton.autotune(configs=[c.to_triton() for c in TUNE_SPACE], key=["H", "TOKENS_BUCKET", "QUERIES_BUCKET"],
                 prune_configs_by={"early_config_prune": prune_configs},
                 do_bench=lambda fn, quantiles: triton.testing.do_bench(fn, warmup=3, rep=15, quantiles=quantiles))
# q's strides stay specialised (multiples of 512 whatever the batch): 16-byte q loads, no recompiles
@triton.jit(do_not_specialize=["num_tokens", "stride_ib", "stride_is", "stride_tl", "H", "S_Q", "TOPK", "split_offset", "s_total",
                               "TOKENS_BUCKET", "QUERIES_BUCKET"])
def tile512_partial_kernel(
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
    D_NOPE: tl.constexpr, D_ROPE: tl.constexpr, TILE: tl.constexpr, NUM_TILES: tl.constexpr,
    DATA_BYTES: tl.constexpr, SCALE_BYTES: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_T: tl.constexpr,
):
    D: tl.constexpr = D_NOPE + D_ROPE
    pid_h = tl.program_id(0)
    split = tl.program_id(1)
    pid_q = tl.program_id(2)
    bi = pid_q // S_Q
    si = pid_q % S_Q

    heads = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    hmask = heads < H
    d = tl.arange(0, D)
    is_nope = d < D_NOPE
    q = tl.load(q_ptr + bi * stride_qb + si * stride_qs + heads[:, None] * stride_qh + d[None, :],
                mask=hmask[:, None], other=0.0)  # [BLOCK_H, 512] bf16: nope and rope in one row

    end_all = TOPK
    if HAS_TOPK_LEN:
        end_all = tl.minimum(tl.load(topk_len_ptr + bi * stride_tl), TOPK)
    start = split * tokens_per_split
    end = tl.minimum(start + tokens_per_split, end_all)

    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, D], tl.float32)
    idx_row = idx_ptr + bi * stride_ib + si * stride_is
    g = tl.arange(0, SCALE_BYTES)
    for t0 in range(start, end, BLOCK_T):
        offs = t0 + tl.arange(0, BLOCK_T)
        idx = tl.load(idx_row + offs, mask=offs < end, other=-1)
        valid = (offs < end) & (idx >= 0) & (idx < num_tokens)  # [BLOCK_T]
        safe = tl.where(valid, idx, 0)
        page = (safe // block_size).to(tl.int64)
        off = (safe % block_size).to(tl.int64)
        row = tl.multiple_of(page * stride_page + off * DATA_BYTES, 16)  # [BLOCK_T] byte offset of the token
        srow = page * stride_page + block_size * DATA_BYTES + off * SCALE_BYTES
        k8 = tl.load(cache_f8 + row[:, None] + d[None, :], mask=valid[:, None] & is_nope[None, :], other=0.0)
        # bf16 element (row + 448)/2 + (d - 448) for the rope columns; the nope columns are masked off
        rrow = tl.multiple_of(row // 2 - D_NOPE // 2, 8)
        rope = tl.load(cache_bf16 + rrow[:, None] + d[None, :], mask=valid[:, None] & (d >= D_NOPE)[None, :],
                       other=0.0)  # [BLOCK_T, 512] bf16, zero outside the rope columns
        sbyte = tl.load(cache_u8 + srow[:, None] + g[None, :], mask=valid[:, None] & (g < NUM_TILES)[None, :],
                        other=0)  # [BLOCK_T, SCALE_BYTES]; the pad byte's group is the rope's: scale 0
        k_nope = dequant_fp32(k8, sbyte, BLOCK_T, SCALE_BYTES, TILE, D)
        k = tl.where(is_nope[None, :], k_nope, rope)  # [BLOCK_T, 512] bf16, exact
        if DOT_FP32:
            k = k.to(tl.float32)
        s = mma(q, tl.trans(k), DOT_FP32)  # [BLOCK_H, BLOCK_T]
        s = tl.where(valid[None, :], s * sm_scale_log2, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # no (-inf) - (-inf)
        alpha = tl.exp2(m_i - m_use)
        p = tl.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + mma(to_bf16(p, DOT_FP32), k, DOT_FP32)
        m_i = m_new

    live = l_i != 0  # a NaN sum is live: written as NaN, never dropped by the combine as an empty split
    inv_l = tl.where(live, 1.0 / l_i, 0.0)
    lse2 = tl.where(live, m_i + tl.log2(l_i), float("-inf"))
    slot = (pid_q * H + heads) * s_total + split_offset + split  # [BLOCK_H]
    tl.store(part_lse_ptr + slot, lse2, mask=hmask)
    # an empty split writes only its -inf LSE; the combine never reads its out
    tl.store(part_out_ptr + slot[:, None].to(tl.int64) * D + d[None, :], acc * inv_l[:, None],
             mask=(hmask & live)[:, None])


LAYOUT_KEYS = ("D_NOPE", "D_ROPE", "TILE", "NUM_TILES", "DATA_BYTES", "SCALE_BYTES")  # no NOPE_PAD: rope fills it


def interpreter_config(heads: int) -> TiledConfig:
    """The one config the CPU interpreter runs: big tiles mean few (slow) interpreted programs."""
    bh = head_group(heads)
    return TiledConfig(BLOCK_H=bh, BLOCK_T=64, num_warps=8 if bh == 64 else 4)  # within the register rule


def check_config(config) -> TiledConfig:
    """A user's forced config, validated; ValueError if unsupported or over the target's shared memory."""
    cfg = TiledConfig.from_any(config, ALLOWED, "tile512")
    _, reason = prune_reason(cfg, 0, current_target())
    if reason:
        raise ValueError(f"config {cfg.label}: {reason}")
    return cfg


def launch_tile512_partial(*, q, cache, indices, topk_length, part_out, part_lse, split_offset, num_splits,
                           tokens_per_split, sm_scale, config=None):
    """Run the 512-tile partial kernel for one KV scope into splits [split_offset, split_offset+num_splits)."""
    b, s_q, h, _ = q.shape
    args = dict(**partial_args(q=q, cache=cache, indices=indices, topk_length=topk_length, part_out=part_out,
                               part_lse=part_lse, split_offset=split_offset, tokens_per_split=tokens_per_split,
                               sm_scale=sm_scale), **layout_constexprs(layout_of(cache), LAYOUT_KEYS))
    if INTERPRET and config is None:
        config = interpreter_config(h)
    if config is None:
        grid = lambda META: (cdiv(h, META["BLOCK_H"]), num_splits, b * s_q)  # noqa: E731
        launch(tile512_partial_kernel, grid, args)
        return
    cfg = check_config(config)
    grid = (cdiv(h, cfg.BLOCK_H), num_splits, b * s_q)
    launch(tile512_partial_kernel.fn, grid, dict(**args, **cfg.meta(), num_warps=cfg.num_warps,
                                                 num_stages=cfg.num_stages))
