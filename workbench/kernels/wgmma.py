"""Ladder rung "wgmma": a Gluon kernel for Hopper, with q and the KV tile in shared memory.

Every Triton rung below this one holds q as an mma.sync operand in registers (128 of 255 at
BLOCK_H=16) and waits on each tile's gathers, so 2 blocks of 4 warps fit an SM and the loads are
not overlapped. Here, with explicit layouts (Gluon):

- the token tile is the M side of the MMA (swapped: S^T = K q^T and O^T = K^T P^T), so wgmma
  takes K (A) and q (B) from shared memory and any BLOCK_H of 16..64 runs without padding;
- the two warpgroups split S^T by heads and O^T by output columns: no duplicated work, and the
  fp32 accumulator is 2*BLOCK_H registers per thread (32 at 16 heads, 128 at 64);
- the next tile's bytes are loaded into registers before this tile's MMAs, and the PV wgmma runs
  asynchronously while the next tile is dequantised into the other of two shared K buffers.

What it should move (written before measuring): the issue-rate limit of the Triton rungs (CPI ~6
at 2 warps per scheduler, ncu) gives way to overlap: h16 from 113 us towards the 33 us gather
floor plus the dequant time (~10 us for 993 tokens/SM), so 50-70 us; h64 below 100 us.
GPU only (sm_90): Gluon does not run under the interpreter.

Six constexpr switches make the later rungs (registered in ``catalog``), and a seventh lets the combine launch early: TOKEN_LANES, how many lanes
share one token's loads (32 here; "wgmma_4lane": 4, so each thread does the index and address arithmetic of
2 tokens a tile, not 8); ROPE_WORDS ("wgmma_rope": the rope is loaded as the last group's output words, so
one store writes the whole tile and a barrier goes); K_BUFFERS (2 here; "wgmma_2cta": 1, which with a
128-register cap fits two blocks per SM at 16 heads); HEAD_WARPS ("wgmma_headwarps": the softmax runs in a
layout where each warp holds whole heads, so its max needs no cross-warp reduction, and the row sums stay
per thread until the end); SMEM_XCHG ("wgmma_xchg": the valid mask and the rescale factors change layout
through shared memory at barriers the tile already has, instead of layout conversions with barriers of
their own); F16 ("wgmma_f16": K, q and P in f16, so the hardware's e4m3 -> f16 pair conversion replaces the
bit-built bf16 dequant; q scaled per head by a power of two, K by 2**7; a split with a scale byte outside 105..127
or a rope value of 512 or more runs again in bf16, so every cache is exact: see ``F16_MIN_SCALE_BYTE``);
LAUNCH_DEPENDENTS (every rung: griddepcontrol.launch_dependents after the main loop, so a combine launched as a
programmatic dependent starts while the epilogue runs; see ``decode.combine_pdl``).

LEAVE_OUT (0 in every rung) is for measurement only: a bit mask of the loop's stages to drop (``LEAVE_OUT_BITS``),
so a timing isolates what each stage costs (``workbench.isolate``). Any bit set makes the output wrong.
"""
from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, warpgroup_mma, warpgroup_mma_init,
                                                              warpgroup_mma_wait)

from ..layout import layout_of
from .common import cdiv, e4m3_bf16x2_asm, head_group, launch, layout_constexprs, partial_args
from .configs import TiledConfig

ALLOWED = dict(BLOCK_H=(16, 32, 64), BLOCK_T=(64,), num_warps=(8,), num_stages=(1,))
CONFIG_SPACE = [TiledConfig(BLOCK_H=bh, BLOCK_T=64, num_warps=8) for bh in ALLOWED["BLOCK_H"]]
NUM_WARPS = 8  # two warpgroups
LAYOUT_KEYS = ("D_NOPE", "D_ROPE", "TILE", "NUM_TILES", "DATA_BYTES", "SCALE_BYTES")


def estimate_shared_bytes(c: TiledConfig, K_BUFFERS: int = 2, ROPE_WORDS: int = 0, HEAD_WARPS: int = 0,
                          SMEM_XCHG: int = 0, TOKEN_LANES: int = 32, F16: int = 0, LAUNCH_DEPENDENTS: int = 0,
                          LEAVE_OUT: int = 0) -> int:
    """Shared bytes of one block, as the compiler allocates them (sm_90 lab, every rung's configs): K_BUFFERS
    16-bit K tiles (1 KB/token each), q (1 KB/head), P (2 B/token/head), and the layout changes' scratch, the
    largest one live at a time: S^T into the head-warp layout (4 B/token/head) with HEAD_WARPS, else the
    cross-warp max/sum (16 B/head) or, with the rope in its own layout, its int64 row offsets (8 B/token);
    SMEM_XCHG's valid bytes and rescale factors (1 B/token, 4 B/head). The rope is stored straight into the K
    tile; the epilogue's transposed accumulator reuses freed space. TOKEN_LANES, F16, LAUNCH_DEPENDENTS and LEAVE_OUT
    move no shared bytes (f16 and bf16 are both 2 bytes); they are named so that a misspelled switch is a TypeError."""
    t, h = c.BLOCK_T, c.BLOCK_H
    scratch = 4 * t * h if HEAD_WARPS else max(16 * h, 0 if ROPE_WORDS else 8 * t)
    xchg = t + 4 * h if SMEM_XCHG else 0
    return K_BUFFERS * 1024 * t + 1024 * h + 2 * t * h + scratch + xchg


@gluon.jit
def wgmma_partial_kernel(
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
    HAS_TOPK_LEN: gl.constexpr, DOT_FP32: gl.constexpr,
    D_NOPE: gl.constexpr, D_ROPE: gl.constexpr, TILE: gl.constexpr, NUM_TILES: gl.constexpr,
    DATA_BYTES: gl.constexpr, SCALE_BYTES: gl.constexpr,
    BLOCK_H: gl.constexpr, BLOCK_T: gl.constexpr, BS_SHIFT: gl.constexpr,
    TOKEN_LANES: gl.constexpr = 32,    # lanes that share one token's loads (see L3): 32, 16, 8 or 4
    K_BUFFERS: gl.constexpr = 2,       # 2: PV of one tile overlaps the next tile's store; 1: half the shared memory
    ROPE_WORDS: gl.constexpr = 0,      # 1: rope loaded in the words' own layout, stored with the nope (one barrier less)
    HEAD_WARPS: gl.constexpr = 0,      # 1: softmax with whole heads per warp (no cross-warp max/sum per tile)
    SMEM_XCHG: gl.constexpr = 0,       # 1 (with HEAD_WARPS): valid and alpha cross layouts at the tile's own barriers
    F16: gl.constexpr = 0,             # 1: K, q and P in f16 (K by the hardware e4m3x2 -> f16x2 convert), bf16 rerun
    LAUNCH_DEPENDENTS: gl.constexpr = 0,  # 1: the combine may launch once the main loop is done (PDL)
    LEAVE_OUT: gl.constexpr = 0,       # measurement only: stages dropped from the loop (LEAVE_OUT_BITS); wrong output
):
    gl.static_assert(HEAD_WARPS >= SMEM_XCHG, "SMEM_XCHG moves the head-warp softmax's values: needs HEAD_WARPS")
    gl.static_assert(ROPE_WORDS >= F16, "F16 converts the rope in the words' layout: needs ROPE_WORDS")
    KT: gl.constexpr = gl.float16 if F16 else gl.bfloat16  # the MMA operands' type: K, q, P
    D: gl.constexpr = D_NOPE + D_ROPE
    PT_SMEM: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, BLOCK_T], KT)
    V_SMEM: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])
    K_SMEM: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16)
    Q_SMEM: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, D], KT)
    P_SMEM: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_T, BLOCK_H], KT)

    q_smem = gl.allocate_shared_memory(KT, [BLOCK_H, D], Q_SMEM)
    k_smem = gl.allocate_shared_memory(KT, [K_BUFFERS, BLOCK_T, D], K_SMEM)
    if HEAD_WARPS:  # P stored head-major: a thread's TT tokens of its head are contiguous; the PV reads P^T
        pt_smem = gl.allocate_shared_memory(KT, [BLOCK_H, BLOCK_T], PT_SMEM)
        p_smem = pt_smem.permute((1, 0))
    else:
        p_smem = gl.allocate_shared_memory(KT, [BLOCK_T, BLOCK_H], P_SMEM)
        pt_smem = p_smem
    valid_smem = p_smem  # stand-ins, unread without SMEM_XCHG
    alpha_smem = p_smem
    if SMEM_XCHG:
        valid_smem = gl.allocate_shared_memory(gl.int8, [BLOCK_T], V_SMEM)
        alpha_smem = gl.allocate_shared_memory(gl.float32, [BLOCK_H], V_SMEM)

    pid_h = gl.program_id(0)
    split = gl.program_id(1)
    pid_q = gl.program_id(2)
    m_i, l_i, acc = split_pass(
        pid_h, split, pid_q, q_smem, k_smem, p_smem, pt_smem, valid_smem, alpha_smem, q_ptr, stride_qb, stride_qs,
        stride_qh, cache_u8, cache_bf16, stride_page, block_size, num_tokens, idx_ptr, stride_ib, stride_is,
        topk_len_ptr, stride_tl, sm_scale_log2, H, S_Q, TOPK, tokens_per_split, HAS_TOPK_LEN, D_NOPE, D_ROPE, TILE,
        DATA_BYTES, SCALE_BYTES, BLOCK_H, BLOCK_T, BS_SHIFT, TOKEN_LANES, K_BUFFERS, ROPE_WORDS, HEAD_WARPS,
        SMEM_XCHG, F16, LEAVE_OUT)
    if LAUNCH_DEPENDENTS:
        # the combine, when launched as a programmatic dependent (decode.combine_pdl), may be scheduled once
        # every block is here: its launch overlaps this epilogue (and a bf16 pass, if one follows), and it waits
        # (griddepcontrol.wait) for the whole grid before reading the partials. Here, not at the kernel's start:
        # waiting combine blocks beside running ones made the production shape 3% slower (exploratory H200 run).
        # No effect on an ordinary launch
        gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // $0", "=r", [], dtype=gl.int32,
                                  is_pure=False, pack=1)
    out_mult = 1.0
    if F16:
        # the block's verdict: a reduction through shared memory, behind a barrier that follows every warp's last
        # wgmma, so the buffers are free for a second pass
        bad = not_finite(l_i)
        out_mult = gl.where(bad, 1.0, F16_OUT_MULT)
        if bad:  # a tile outside the f16 window (or non-finite data): this split again with bf16 operands, exactly
            z = opaque_zero()  # every address of the second pass computed afresh, not kept from the first
            m_i, l_i, acc = split_pass(
                gl.program_id(0) + z, gl.program_id(1) + z, gl.program_id(2) + z,
                q_smem._reinterpret(gl.bfloat16, [BLOCK_H, D], Q_SMEM),
                k_smem._reinterpret(gl.bfloat16, [K_BUFFERS, BLOCK_T, D], K_SMEM),
                p_smem._reinterpret(gl.bfloat16, p_smem.shape, p_smem.layout),
                pt_smem._reinterpret(gl.bfloat16, pt_smem.shape, pt_smem.layout), valid_smem, alpha_smem, q_ptr + z,
                stride_qb, stride_qs, stride_qh, cache_u8 + z, cache_bf16 + z, stride_page, block_size, num_tokens,
                idx_ptr + z,
                stride_ib, stride_is, topk_len_ptr, stride_tl, sm_scale_log2, H, S_Q, TOPK, tokens_per_split,
                HAS_TOPK_LEN, D_NOPE, D_ROPE, TILE, DATA_BYTES, SCALE_BYTES, BLOCK_H, BLOCK_T, BS_SHIFT, TOKEN_LANES,
                K_BUFFERS, ROPE_WORDS, HEAD_WARPS, SMEM_XCHG, 0, LEAVE_OUT)
    store_partial(m_i, l_i, acc, out_mult, part_out_ptr, part_lse_ptr, pid_q, pid_h, split, split_offset, s_total,
                  H, BLOCK_H, D)


# The f16 window. The hardware converts e4m3 pairs to f16 pairs exactly in one instruction (cvt.rn.f16x2.e4m3x2,
# sm_89+); it has no bf16 form, and the bit-built bf16 costs ~6 instructions a pair. One f16 multiply then applies
# the scale, times 2**F16_K_SHIFT: the f16 K tile holds K * 2**7, and the scores and the output take the 2**-7
# back (qk_scale, F16_OUT_MULT). f16 has 5 exponent bits: e4m3 magnitudes are 2**-9..448 and f16's
# 2**-24..65504, so the product is exact for scale bytes e in [F16_MIN_SCALE_BYTE, F16_MAX_SCALE_BYTE] = [105, 127]
# (scales 2**-22..2**0: vLLM's writers give small tiles bytes 105..111, FlashMLA's quantiser 114 and up; 127 is
# amax 448), and the rope (bf16, scaled by 2**7 in fp32 before its f16 rounding) for |rope| < 512 (exact from
# 2**-24 up; below that, absolute errors under 2**-32). q needs no window: each head is scaled by a power of two,
# so its products stay far inside fp32. Outside the window nothing is checked per tile: a scale byte outside it
# dequantises to NaN and a rope of 512 or more to f16 inf, so the split's row sums or accumulator come out
# non-finite, and the split runs again with bf16 operands (unscaled q), exactly as the bf16 rungs: every scale
# byte 0..254, any rope. Non-finite data (NaN in a selected token) takes the same second pass, to FlashMLA's NaN.
F16_MIN_SCALE_BYTE, F16_MAX_SCALE_BYTE = 105, 127
F16_K_SHIFT = 7
_K_SHIFT = gl.constexpr(F16_K_SHIFT)
F16_OUT_MULT = gl.constexpr(2.0 ** -F16_K_SHIFT)
Q_TOP = gl.constexpr(14)     # each head's largest |q| is scaled into [2**Q_TOP, 2**(Q_TOP+1)): f16-exact down to
                             # 2**-31 of it
Q_EXP_CLAMP = gl.constexpr(100)  # the head exponent's range: zero, tiny and inf heads stay finite powers of two
# LEAVE_OUT's bits: the loop stages a measurement may drop (the first tile is still loaded with "loads" left out)
LEAVE_OUT_BITS = {"loads": 1, "dequant": 2, "softmax": 4, "qk": 8, "pv": 16}


@gluon.jit
def _pow2(e):
    """int32 e in [-126, 127] -> fp32 2**e, exactly."""
    return ((e + 127) << 23).to(gl.float32, bitcast=True)


@gluon.jit
def split_pass(pid_h, split, pid_q, q_smem, k_smem, p_smem, pt_smem, valid_smem, alpha_smem, q_ptr, stride_qb,
               stride_qs, stride_qh, cache_u8, cache_bf16, stride_page, block_size, num_tokens, idx_ptr, stride_ib,
               stride_is, topk_len_ptr, stride_tl, sm_scale_log2, H, S_Q, TOPK, tokens_per_split,
               HAS_TOPK_LEN: gl.constexpr, D_NOPE: gl.constexpr, D_ROPE: gl.constexpr, TILE: gl.constexpr,
               DATA_BYTES: gl.constexpr, SCALE_BYTES: gl.constexpr, BLOCK_H: gl.constexpr, BLOCK_T: gl.constexpr,
               BS_SHIFT: gl.constexpr, TOKEN_LANES: gl.constexpr, K_BUFFERS: gl.constexpr, ROPE_WORDS: gl.constexpr,
               HEAD_WARPS: gl.constexpr, SMEM_XCHG: gl.constexpr, F16: gl.constexpr, LEAVE_OUT: gl.constexpr):
    """One pass over the block's split (:func:`attend`), from its program ids and the kernel's arguments alone, so a
    second pass keeps nothing of the first live across its loop."""
    bi = pid_q // S_Q
    si = pid_q % S_Q
    end_all = TOPK
    if HAS_TOPK_LEN:
        end_all = gl.minimum(gl.load(topk_len_ptr + bi * stride_tl), TOPK)
    start = split * tokens_per_split
    end = gl.minimum(start + tokens_per_split, end_all)
    return attend(q_smem, k_smem, p_smem, pt_smem, valid_smem, alpha_smem, q_ptr + bi * stride_qb + si * stride_qs,
                  stride_qh, pid_h, H, sm_scale_log2, cache_u8, cache_bf16, stride_page, block_size, num_tokens,
                  idx_ptr + bi * stride_ib + si * stride_is, start, end, D_NOPE, D_ROPE, TILE, DATA_BYTES, SCALE_BYTES,
                  BLOCK_H, BLOCK_T, BS_SHIFT, TOKEN_LANES, K_BUFFERS, ROPE_WORDS, HEAD_WARPS, SMEM_XCHG, F16, LEAVE_OUT)


@gluon.jit
def opaque_zero():
    """0, from a side-effecting asm the compiler cannot see through: added to a second pass's program ids and
    pointers, it keeps every value that pass derives from them from being merged with the first pass's, which
    would keep those values live (and spilled) across the first pass's loop."""
    return gl.inline_asm_elementwise("mov.u32 $0, 0;", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def load_q(q_row, stride_qh, pid_h, H, BLOCK_H: gl.constexpr, D: gl.constexpr, QL: gl.constexpr):
    """The block's heads of one query: [BLOCK_H, D] bf16 in layout QL, zero past the last head."""
    qh = pid_h * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, QL))
    qd = gl.arange(0, D, layout=gl.SliceLayout(0, QL))
    return gl.load(q_row + qh[:, None] * stride_qh + qd[None, :], mask=(qh < H)[:, None], other=0.0)


@gluon.jit
def scale_q_per_head(q):
    """q [BLOCK_H, D] bf16 -> (q * 2**-E fp32, E int32 [BLOCK_H]): E puts each head's largest |q| in
    [2**Q_TOP, 2**(Q_TOP+1)), so q fits f16 wherever bf16 puts it (a power of two: exact in bf16 too). Heads of
    zeros, subnormals or non-finite values get E clamped to +-Q_EXP_CLAMP."""
    qf = q.to(gl.float32)
    amax = gl.max(gl.abs(qf), axis=1)
    e = ((amax.to(gl.int32, bitcast=True) >> 23) & 0xFF) - 127 - Q_TOP
    e = gl.minimum(gl.maximum(e, -Q_EXP_CLAMP), Q_EXP_CLAMP)
    return qf * gl.expand_dims(_pow2(-e), 1), e


@gluon.jit
def qk_scale(sm_scale_log2, q_exp, F16: gl.constexpr):
    """The per-head factor that turns an MMA score into log2 units: sm_scale * log2(e) * 2**E, and 2**-7 more
    for the f16 K tile (it holds K * 2**F16_K_SHIFT)."""
    if F16:
        return sm_scale_log2 * _pow2(q_exp - _K_SHIFT)
    return sm_scale_log2 * _pow2(q_exp)


@gluon.jit
def store_partial(m_i, l_i, acc, out_mult, part_out_ptr, part_lse_ptr, pid_q, pid_h, split, split_offset, s_total,
                  H, BLOCK_H: gl.constexpr, D: gl.constexpr):
    """The epilogue: the split's normalised output acc / l * out_mult (acc: O^T [D, BLOCK_H] fp32) and its
    base-2 LSE m + log2(l) into the partial buffers."""
    NW: gl.constexpr = gl.num_warps()
    OL: gl.constexpr = acc.type.layout
    OUT: gl.constexpr = gl.BlockedLayout([4, 1], [32, 1], [1, NW], [0, 1])  # [D, BLOCK_H], coalesced along d
    live = l_i != 0  # a NaN sum is live: written as NaN, never dropped by the combine as an empty split
    inv_l = gl.where(live, out_mult / l_i, 0.0)
    lse2 = gl.where(live, m_i + gl.log2(l_i), float("-inf"))
    heads = pid_h * BLOCK_H + gl.arange(0, BLOCK_H, layout=l_i.type.layout)
    slot = (pid_q * H + heads) * s_total + split_offset + split  # [BLOCK_H]
    gl.store(part_lse_ptr + slot, lse2, mask=heads < H)
    out = gl.convert_layout(acc * gl.expand_dims(gl.convert_layout(inv_l, gl.SliceLayout(0, OL)), 0), OUT)
    oh = pid_h * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(0, OUT))
    od = gl.arange(0, D, layout=gl.SliceLayout(1, OUT))
    oslot = (pid_q * H + oh) * s_total + split_offset + split
    live_o = gl.convert_layout(live, gl.SliceLayout(0, OUT))
    # an empty split writes only its -inf LSE; the combine never reads its out
    gl.store(part_out_ptr + gl.expand_dims(oslot.to(gl.int64) * D, 0) + gl.expand_dims(od, 1), out,
             mask=gl.expand_dims((oh < H) & live_o, 0))


@gluon.jit
def attend(q_smem, k_smem, p_smem, pt_smem, valid_smem, alpha_smem, q_row, stride_qh, pid_h, H, sm_scale_log2,
           cache_u8, cache_bf16, stride_page, block_size, num_tokens, idx_row, start, end, D_NOPE: gl.constexpr, D_ROPE: gl.constexpr,
           TILE: gl.constexpr, DATA_BYTES: gl.constexpr, SCALE_BYTES: gl.constexpr, BLOCK_H: gl.constexpr,
           BLOCK_T: gl.constexpr, BS_SHIFT: gl.constexpr, TOKEN_LANES: gl.constexpr, K_BUFFERS: gl.constexpr,
           ROPE_WORDS: gl.constexpr, HEAD_WARPS: gl.constexpr, SMEM_XCHG: gl.constexpr, F16: gl.constexpr,
           LEAVE_OUT: gl.constexpr):
    """The main loop over one split's tiles [start, end), run by every warp of the block (gl.num_warps(): 8, two
    warpgroups, in the rungs; 4 in wgmma_ws's bf16 rerun): gather, dequantise into K buffer `buf`, QK, online
    softmax, PV. q_smem holds q * 2**-E in the operands' type; qk_scale [BLOCK_H] turns scores into log2 units.

    Returns (m_i, l_i [BLOCK_H], O^T [D, BLOCK_H] fp32 unnormalised). With F16, a valid token outside the f16
    window makes l_i or O^T non-finite (see F16_MIN_SCALE_BYTE): :func:`not_finite` tells the caller to run the
    split again with bf16 operands, which are exact for every cache.
    """
    NW: gl.constexpr = gl.num_warps()
    KT: gl.constexpr = gl.float16 if F16 else gl.bfloat16
    D: gl.constexpr = D_NOPE + D_ROPE
    G: gl.constexpr = SCALE_BYTES  # 8 column groups of TILE: 7 fp8 nope tiles and the rope
    W: gl.constexpr = TILE // 4  # int32 words of one fp8 group
    # [BLOCK_T, G, W] raw words (4 fp8 each), 16 B per load, 64 B of a group contiguous over 4 lanes. Each of
    # the TOKEN_LANES lanes sharing a token repeats its index and address arithmetic, so fewer lanes per
    # token (each taking more of its groups) means fewer tokens, hence less arithmetic, per thread:
    # BLOCK_T * TOKEN_LANES / (32 * NW) tokens per thread
    L3: gl.constexpr = gl.BlockedLayout([1, 32 // TOKEN_LANES, 4], [32 // TOKEN_LANES, TOKEN_LANES // 4, 4],
                                        [NW, 1, 1], [2, 1, 0])
    ROWS: gl.constexpr = gl.SliceLayout(1, gl.SliceLayout(2, L3))        # [BLOCK_T]
    GRP2: gl.constexpr = gl.SliceLayout(2, L3)                           # [BLOCK_T, G]
    KW: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=32)
    ROPE: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [NW, 1], [1, 0])  # [BLOCK_T, TILE] bf16, 16 B/thread
    # S^T [BLOCK_T, BLOCK_H]: the warpgroups take a share of the heads each
    SL: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, NW // 4],
                                                 instr_shape=[16, BLOCK_H // (NW // 4), 16])
    # O^T [D, BLOCK_H]: the warpgroups take alternate 64-row blocks of the output columns
    OL: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                 instr_shape=[16, BLOCK_H, 16])
    # HEAD_WARPS: S^T [BLOCK_T, BLOCK_H] with one head per lane column, so a head's BLOCK_T tokens sit in one warp
    # (BLOCK_H // NW heads a warp, TT tokens a thread): the max over tokens is in-thread plus a few shuffles
    TT: gl.constexpr = BLOCK_T * BLOCK_H // (32 * NW)
    SB: gl.constexpr = gl.BlockedLayout([TT, 1], [BLOCK_T // TT, 32 * TT // BLOCK_T], [1, NW], [0, 1])
    HL: gl.constexpr = gl.SliceLayout(0, SB) if HEAD_WARPS else gl.SliceLayout(0, SL)  # [BLOCK_H] of the softmax

    g = gl.arange(0, G, layout=gl.SliceLayout(0, GRP2))
    g3 = gl.expand_dims(gl.expand_dims(g, 0), 2)  # [1, G, 1]
    w3 = gl.expand_dims(gl.expand_dims(gl.arange(0, W, layout=gl.SliceLayout(0, gl.SliceLayout(1, L3))), 0), 1)
    rc = gl.arange(0, TILE, layout=gl.SliceLayout(0, ROPE))
    cache_w = cache_u8.to(gl.pointer_type(gl.int32), bitcast=True)
    cache_d = cache_u8.to(gl.pointer_type(gl.int64), bitcast=True)
    is_rope = g3 == G - 1
    QL: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [NW, 1], [1, 0])   # [BLOCK_H, D] bf16

    # software pipeline: indices two tiles ahead, bytes one tile ahead of the tile being dequantised
    idx = _load_idx(idx_row, start, end, BLOCK_T, ROWS)
    words, rope, sbyte, valid = _load_tile(cache_w, cache_d, cache_u8, cache_bf16, idx, start, end, num_tokens,
                                           stride_page, block_size, g, g3, w3, rc, D_NOPE, DATA_BYTES, SCALE_BYTES,
                                           W, BLOCK_T, ROWS, ROPE, BS_SHIFT, ROPE_WORDS)
    idx = _load_idx(idx_row, start + BLOCK_T, end, BLOCK_T, ROWS)
    # q while the first tile's bytes are in flight; stored before the loop's first barrier, which the QK follows
    q = load_q(q_row, stride_qh, pid_h, H, BLOCK_H, D, QL)
    if F16:  # each head's largest |q| in [2**14, 2**15)
        q, q_exp = scale_q_per_head(q)
    else:  # bf16 holds any q as it is (and a scaled q could overflow the fp32 scores against a huge K)
        q_exp = gl.zeros([BLOCK_H], gl.int32, layout=gl.SliceLayout(1, QL))
    q_smem.store(q.to(KT))
    scale = gl.convert_layout(qk_scale(sm_scale_log2, q_exp, F16), HL)

    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=HL)
    l_i = gl.zeros([BLOCK_H], gl.float32, layout=HL)
    l_t = gl.zeros([BLOCK_T, BLOCK_H], gl.float32, layout=SB)  # HEAD_WARPS: per-thread row sums, reduced at the end
    acc = warpgroup_mma_init(gl.zeros([D, BLOCK_H], gl.float32, layout=OL))  # carried as an async result
    s_zero = gl.zeros([BLOCK_T, BLOCK_H], gl.float32, layout=SL)
    buf = 0
    for t0 in range(start, end, BLOCK_T):
        # dequantise the tile in hand into K buffer `buf` (the other buffer may still feed the last PV)
        if LEAVE_OUT & 2:  # no dequant, but still waits on the words: f16 1.0 or 0 in every half
            lo = words & 0x3C003C00
            hi = lo
        elif F16:
            lo, hi = _dequant_words_f16(words, gl.expand_dims(_f16_scale_pairs(sbyte), 2))
        else:
            lo, hi = _dequant_words(words, gl.expand_dims(_bf16_scale_pairs(sbyte), 2))
        kb = k_smem.index(buf)
        if K_BUFFERS == 1:  # the last PV still reads the one buffer
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
            # ... and so does the other warpgroup's (its half of the output columns, every token), which the wait
            # above does not retire, while this thread stores every column of its tokens. Triton's membar pass
            # puts a barrier here by itself (same PTX without this line); written out so the hazard does not
            # rest on that analysis (tests/test_resources_gluon.py reads the order in the PTX)
            gl.thread_barrier()
        if ROPE_WORDS:  # group G-1's outputs are the rope's pairs, as the same thread loaded them
            if F16:
                rlo, rhi = _bf16x4_to_f16(rope)
            else:
                rlo = rope.to(gl.int32)
                rhi = (rope >> 32).to(gl.int32)
            lo = gl.where(is_rope, rlo, lo)
            hi = gl.where(is_rope, rhi, hi)
        # else the last group holds rope bytes as if fp8 (garbage); the rope store below replaces it
        kb._reinterpret(gl.int32, [BLOCK_T, D // 2], KW).store(gl.reshape(gl.join(lo, hi), [BLOCK_T, D // 2]))
        if not ROPE_WORDS:
            gl.thread_barrier()
            kb.slice(D_NOPE, D_ROPE, dim=1).store(rope.to(KT))
        cur_valid = valid
        if SMEM_XCHG:  # read back in the softmax's layout after the barrier below
            valid_smem.store(valid.to(gl.int8))
        # the next tile's gathers are in flight during this tile's MMAs and softmax
        if not LEAVE_OUT & 1:  # (no loads: every tile reuses the first tile's bytes)
            words, rope, sbyte, valid = _load_tile(cache_w, cache_d, cache_u8, cache_bf16, idx, t0 + BLOCK_T, end,
                                                   num_tokens, stride_page, block_size, g, g3, w3, rc, D_NOPE,
                                                   DATA_BYTES, SCALE_BYTES, W, BLOCK_T, ROWS, ROPE, BS_SHIFT,
                                                   ROPE_WORDS)
            idx = _load_idx(idx_row, t0 + 2 * BLOCK_T, end, BLOCK_T, ROWS)
        fence_async_shared()
        gl.thread_barrier()
        if LEAVE_OUT & 8:  # no QK MMA: constant scores; the last PV is still retired here
            s = s_zero + 1.0
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        else:
            s = warpgroup_mma(kb, q_smem.permute((1, 0)), s_zero, use_acc=False, is_async=True)  # [BLOCK_T, BLOCK_H]
            s, acc = warpgroup_mma_wait(num_outstanding=0, deps=(s, acc))  # also retires the last PV
        if HEAD_WARPS:
            s = gl.convert_layout(s, SB)
            if SMEM_XCHG:
                v = valid_smem.load(gl.SliceLayout(1, SB)) != 0
            else:
                v = gl.convert_layout(cur_valid, gl.SliceLayout(1, SB))
            p, alpha, m_i = _softmax_step(s, v, m_i, scale, F16, LEAVE_OUT & 4)
            l_t = l_t * gl.expand_dims(alpha, 0) + p
            # the last PV of the other warpgroup reads P too: it was retired before the barrier inside the
            # convert_layout above, so this store cannot overwrite P under it
            pt_smem.store(gl.permute(p.to(KT), (1, 0)))
            if SMEM_XCHG:  # applied to the accumulator after the barrier below
                alpha_smem.store(alpha)
            else:
                acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(0, OL)), 0)
        else:
            v = gl.convert_layout(cur_valid, gl.SliceLayout(1, SL))
            p, alpha, m_i = _softmax_step(s, v, m_i, scale, F16, LEAVE_OUT & 4)
            l_i = l_i * alpha + gl.sum(p, 0)
            # safe against the other warpgroup's last PV for the same reason: gl.max above reduces across warps
            # through shared memory, behind a barrier
            p_smem.store(p.to(KT))
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(0, OL)), 0)
        fence_async_shared()
        gl.thread_barrier()
        if SMEM_XCHG:
            acc = acc * gl.expand_dims(alpha_smem.load(gl.SliceLayout(0, OL)), 0)
        if LEAVE_OUT & 16:  # no PV MMA: the accumulator keeps its rescaled zeros (as the loop carries it)
            acc = warpgroup_mma_init(acc)
        else:
            acc = warpgroup_mma(kb.permute((1, 0)), p_smem, acc, is_async=True)  # O^T += K^T P^T
        buf = (buf + 1) % K_BUFFERS
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    if HEAD_WARPS:
        l_i = gl.sum(l_t, 0)
    return m_i, l_i, acc


@gluon.jit
def _softmax_step(s, v, m_i, scale, INF_TO_NAN: gl.constexpr, SKIP: gl.constexpr):
    """_online_softmax, or with SKIP (LEAVE_OUT's softmax bit) the scores as P and no rescaling."""
    if SKIP:
        return s, m_i * 0.0 + 1.0, m_i
    return _online_softmax(s, v, m_i, scale, INF_TO_NAN)


@gluon.jit
def _online_softmax(s, v, m_i, scale, INF_TO_NAN: gl.constexpr):
    """One tile's step of the base-2 online softmax over S^T [BLOCK_T, BLOCK_H] (tokens on axis 0, any layout):
    masked scores in log2 units (scale [BLOCK_H]: qk_scale), the new running max, P and the factor alpha that
    rescales what came before."""
    if INF_TO_NAN:
        # f16 operands: q is scaled and K in the window stays below 2**16, so the fp32 scores cannot overflow: an
        # infinite score comes from an f16 inf in K (a rope of 512 or more). -inf would drop its token without a
        # trace; NaN makes the split's row sums NaN (+inf already does, through inf - inf in exp2), and so sends
        # it to the bf16 pass (not_finite)
        s = gl.where(s == float("-inf"), float("nan"), s)
    s = gl.where(gl.expand_dims(v, 1), s * gl.expand_dims(scale, 0), float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 0))
    m_use = gl.where(m_new == float("-inf"), 0.0, m_new)  # no (-inf) - (-inf)
    alpha = gl.exp2(m_i - m_use)
    p = gl.exp2(s - gl.expand_dims(m_use, 0))
    return p, alpha, m_new


@gluon.jit
def _load_idx(idx_row, t0, end, BLOCK_T: gl.constexpr, ROWS: gl.constexpr):
    offs = t0 + gl.arange(0, BLOCK_T, layout=ROWS)
    return gl.load(idx_row + offs, mask=offs < end, other=-1)


@gluon.jit
def _load_tile(cache_w, cache_d, cache_u8, cache_bf16, idx, t0, end, num_tokens, stride_page, block_size,
               g, g3, w3, rc, D_NOPE: gl.constexpr, DATA_BYTES: gl.constexpr, SCALE_BYTES: gl.constexpr,
               W: gl.constexpr, BLOCK_T: gl.constexpr, ROWS: gl.constexpr, ROPE: gl.constexpr,
               BS_SHIFT: gl.constexpr, ROPE_WORDS: gl.constexpr):
    """Issue one tile's loads: (words [BLOCK_T, G, W] int32 = 4 fp8 each, rope, scale bytes [BLOCK_T, G] u8,
    valid [BLOCK_T]). rope is [BLOCK_T, TILE] bf16, or with ROPE_WORDS [BLOCK_T, G, W] int64 in the words'
    layout, group G-1 only: two bf16 pairs each, the ones that group's outputs must become. Invalid tokens
    load as zero, so NaN in an unselected page never enters a dot. Group G-1 of the words reads the first
    rope bytes and the pad scale byte: both are replaced.
    """
    offs = t0 + gl.arange(0, BLOCK_T, layout=ROWS)
    valid = (offs < end) & (idx >= 0) & (idx < num_tokens)
    safe = gl.where(valid, idx, 0)
    if BS_SHIFT >= 0:  # power-of-two pages: every lane of a warp splits the same 8 indices, so keep it cheap
        page = (safe >> BS_SHIFT).to(gl.int64)
        off = (safe & ((1 << BS_SHIFT) - 1)).to(gl.int64)
    else:
        page = (safe.to(gl.uint32) // block_size.to(gl.uint32)).to(gl.int64)
        off = (safe.to(gl.uint32) % block_size.to(gl.uint32)).to(gl.int64)
    row = page * stride_page + off * DATA_BYTES  # [BLOCK_T] byte offset of the token
    row3 = gl.expand_dims(gl.expand_dims(row // 4, 1), 2)
    v3 = gl.expand_dims(gl.expand_dims(valid, 1), 2)
    words = gl.load(cache_w + row3 + g3 * W + w3, mask=v3, other=0)
    srow = page * stride_page + block_size * DATA_BYTES + off * SCALE_BYTES
    sbyte = gl.load(cache_u8 + gl.expand_dims(srow, 1) + gl.expand_dims(g, 0), mask=gl.expand_dims(valid, 1),
                    other=_F16_LO)  # a masked token's zero words times an in-window scale: 0 in both dequants
    if ROPE_WORDS:
        rrow3 = gl.expand_dims(gl.expand_dims((row + D_NOPE) // 8, 1), 2)
        rope = gl.load(cache_d + rrow3 + w3, mask=v3 & (g3 == SCALE_BYTES - 1), other=0)
    else:
        rrow = gl.convert_layout((row + D_NOPE) // 2, gl.SliceLayout(1, ROPE))
        rvalid = gl.convert_layout(valid, gl.SliceLayout(1, ROPE))
        rope = gl.load(cache_bf16 + gl.expand_dims(rrow, 1) + gl.expand_dims(rc, 0),
                       mask=gl.expand_dims(rvalid, 1), other=0.0)
    return words, rope, sbyte, valid


# common.e4m3_bf16x2_asm with pack=1: one int32 register ($3) holds the group's bf16 scale twice
_DEQUANT_ASM = gl.constexpr(e4m3_bf16x2_asm("$3", "$3"))


@gluon.jit
def _bf16_scale_pairs(sbyte):
    """Scale bytes [BLOCK_T, G] u8 -> int32 words holding the bf16 of 2**(e-127) twice, for every byte 0..254
    (common.bf16_scale_bits)."""
    e = sbyte.to(gl.int32)
    return gl.where(e == 0, 0x0040, e << 7) * 65537


@gluon.jit
def _dequant_words(words, sc):
    """Four e4m3 bytes (one int32 word) -> two words of bf16 pairs, exactly, with no fp32 step, times the scale
    pair sc (:func:`_bf16_scale_pairs`; the formula: :func:`workbench.kernels.common.e4m3_bf16x2_asm`)."""
    return gl.inline_asm_elementwise(
        asm=_DEQUANT_ASM,
        constraints="=r,=r,r,r", args=[words, sc], dtype=(gl.int32, gl.int32), is_pure=True, pack=1)


_F16_LO = gl.constexpr(F16_MIN_SCALE_BYTE)  # 2**-22 * 2**7 = 2**-15: f16's subnormal 0x0200
_F16_HI = gl.constexpr(F16_MAX_SCALE_BYTE)
_DEQUANT_F16_ASM = gl.constexpr("""{
    .reg .b16 l, h;
    .reg .b32 a, b;
    mov.b32 {l, h}, $2;
    cvt.rn.f16x2.e4m3x2 a, l;
    cvt.rn.f16x2.e4m3x2 b, h;
    mul.rn.f16x2 $0, a, $3;
    mul.rn.f16x2 $1, b, $3;
    }""")
# four bf16 (one int64) -> two f16 pairs of the values times 2**F16_K_SHIFT, scaled exactly in fp32 and then
# rounded: exact for 2**-24 <= |x| < 512 (and 0), f16 inf from 512 up (which makes the split's result non-finite)
_BF16X4_F16_ASM = gl.constexpr("""{
    .reg .b32 a, b, x0, x1, x2, x3;
    mov.b64 {a, b}, $2;
    shl.b32 x0, a, 16;
    and.b32 x1, a, 0xFFFF0000;
    shl.b32 x2, b, 16;
    and.b32 x3, b, 0xFFFF0000;
    mul.f32 x0, x0, 0f43000000;
    mul.f32 x1, x1, 0f43000000;
    mul.f32 x2, x2, 0f43000000;
    mul.f32 x3, x3, 0f43000000;
    cvt.rn.f16x2.f32 $0, x1, x0;
    cvt.rn.f16x2.f32 $1, x3, x2;
    }""")


@gluon.jit
def _f16_scale_pairs(sbyte):
    """Scale bytes [BLOCK_T, G] u8 -> int32 words holding the f16 of 2**(e - 127 + F16_K_SHIFT) twice, for e in
    the window [105, 127]; NaN for every other byte, so that a valid token outside the window makes its split's
    result non-finite (masked tokens load an in-window byte and zero words)."""
    e = sbyte.to(gl.int32)
    bits = gl.where(e > _F16_LO, (e - _F16_LO) << 10, 0x200)  # f16's exponent field: e - 120 + 15
    return gl.where((e < _F16_LO) | (e > _F16_HI), 0x7E00, bits) * 65537


@gluon.jit
def _dequant_words_f16(words, sc):
    """Four e4m3 bytes (one int32 word) -> two words of f16 pairs (bytes 0-1, 2-3), times the scale pair sc."""
    return gl.inline_asm_elementwise(asm=_DEQUANT_F16_ASM, constraints="=r,=r,r,r", args=[words, sc],
                                     dtype=(gl.int32, gl.int32), is_pure=True, pack=1)


@gluon.jit
def _bf16x4_to_f16(rope):
    """int64 words of four bf16 -> (int32, int32) words of two f16 each (times 2**F16_K_SHIFT), in the same
    order."""
    return gl.inline_asm_elementwise(asm=_BF16X4_F16_ASM, constraints="=r,=r,l", args=[rope],
                                     dtype=(gl.int32, gl.int32), is_pure=True, pack=1)


@gluon.jit
def not_finite(l_i):
    """Whether any head's row sum in the block is NaN or infinite (a full reduction). With f16 operands, a scale
    byte outside the window (NaN in K), a rope of 512 or more (f16 inf in K: an infinite score, or NaN where q is
    0) and NaN in the data all make some row sum NaN. (A check of the accumulator too made ptxas serialise every
    wgmma of the kernel: C7515, sm_90 lab.)"""
    return gl.reduce_or((l_i != l_i) | (gl.abs(l_i) == float("inf")), 0)


def default_config(heads: int, allowed: dict = ALLOWED) -> TiledConfig:
    """The head group that covers ``heads`` in one program where ``allowed`` lets it (else the largest)."""
    return TiledConfig(BLOCK_H=min(max(allowed["BLOCK_H"]), head_group(heads)), BLOCK_T=64,
                       num_warps=NUM_WARPS)


def launch_wgmma_partial(*, q, cache, indices, topk_length, part_out, part_lse, split_offset, num_splits,
                         tokens_per_split, sm_scale, config=None, allowed=ALLOWED, name="wgmma", maxnreg=None,
                         **switches):
    """Run the Gluon partial kernel for one KV scope into splits [split_offset, split_offset+num_splits).

    allowed, name: the registered rung's config table and name; maxnreg: ptxas's register cap (None: no cap);
    switches: the rung's constexprs (TOKEN_LANES, K_BUFFERS, ROPE_WORDS, HEAD_WARPS, SMEM_XCHG, F16).
    """
    if q.device.type != "cuda" or torch.cuda.get_device_capability(q.device)[0] != 9:
        raise RuntimeError(f"impl={name!r} is a Hopper (sm_90) Gluon kernel: it needs an sm_90 GPU "
                           "(it does not run under TRITON_INTERPRET)")
    if switches.get("SMEM_XCHG") and not switches.get("HEAD_WARPS"):
        raise ValueError(f"{name}: SMEM_XCHG=1 needs HEAD_WARPS=1 (it exchanges the head-warp softmax's values)")
    b, s_q, h, _ = q.shape
    cfg = default_config(h, allowed) if config is None else TiledConfig.from_any(config, allowed, name)
    args = partial_args(q=q, cache=cache, indices=indices, topk_length=topk_length, part_out=part_out,
                        part_lse=part_lse, split_offset=split_offset, tokens_per_split=tokens_per_split,
                        sm_scale=sm_scale)
    grid = (cdiv(h, cfg.BLOCK_H), num_splits, b * s_q)
    bs = cache.shape[1]
    bs_shift = bs.bit_length() - 1 if bs & (bs - 1) == 0 else -1  # shifts for power-of-two pages
    launch(wgmma_partial_kernel, grid, dict(**args, BS_SHIFT=bs_shift,
                                            **layout_constexprs(layout_of(cache), LAYOUT_KEYS),
                                            BLOCK_H=cfg.BLOCK_H, BLOCK_T=cfg.BLOCK_T, num_warps=NUM_WARPS, maxnreg=maxnreg,
                                            **switches))
