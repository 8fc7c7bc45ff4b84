"""The Gluon kernel for Hopper (sm_90), every warp running the whole loop: the rungs "wgmma_xchg" (bf16 operands),
"wgmma_f16" and "wgmma_f16_2cta" (f16 operands; at 16 heads with one K buffer, two blocks per SM).

With explicit layouts (Gluon):

- the token tile is the M side of the MMA (swapped: S^T = K q^T and O^T = K^T P^T), so wgmma takes K (A) and q
  (B) from shared memory and any BLOCK_H of 16..64 runs without padding;
- the two warpgroups split S^T by heads and O^T by output columns: no duplicated work, and the fp32 accumulator
  is 2*BLOCK_H registers per thread (32 at 16 heads, 128 at 64);
- the next tile's bytes are loaded into registers before this tile's MMAs, and the PV wgmma runs asynchronously
  while the next tile is dequantised into the other of two shared K buffers;
- 4 lanes share one token's loads, so each thread does the index and address arithmetic of 2 tokens a tile;
- the rope is loaded in the words' own layout (the last group's outputs), so one store writes the whole tile;
- the softmax runs in a layout where each warp holds whole heads: the max over a tile's tokens is in-thread plus
  shuffles, and the row sums stay per thread until the end;
- the valid mask and the rescale factors change layout through shared memory at the barriers the tile already
  has, not through layout conversions with barriers of their own;
- after the main loop every block signals griddepcontrol.launch_dependents, so a combine launched as a
  programmatic dependent starts while the epilogue runs (``decode.combine_pdl``).

Two constexpr switches make the three rungs (registered in ``catalog``): K_BUFFERS (2; "wgmma_f16_2cta": 1,
which with a 128-register cap fits two blocks per SM at 16 heads) and F16 ("wgmma_f16", "wgmma_f16_2cta": K, q
and P in f16, so the hardware's e4m3 -> f16 pair conversion replaces the bit-built bf16 dequant; q scaled per head
by a power of two, K by 2**7; a split with a scale byte outside 105..127 or a rope value of 512 or more runs again
in bf16, so every cache is exact: see ``gluon_common.F16_MIN_SCALE_BYTE``). The kernel got here one rung at a time
(rungs 5-9, each a switch of this kernel, no longer in the code; ``data/rungs.csv`` names the commit that runs them).

LEAVE_OUT (0 in every rung) is for measurement only: a bit mask of the loop's stages to drop
(``gluon_common.LEAVE_OUT_BITS``), so a timing isolates what each stage costs (``workbench.bench.isolate``). Any bit set
makes the output wrong.
GPU only (sm_90): Gluon does not run under the interpreter.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, warpgroup_mma, warpgroup_mma_init,
                                                              warpgroup_mma_wait)

from .common import cdiv, head_group, launch, scope_args, split_args
from .configs import TiledConfig
from .gluon_common import (F16_OUT_MULT, bf16_scale_pairs, bf16x4_to_f16, cache_constexprs, dequant_words,
                           dequant_words_f16, epilogue_args, f16_scale_pairs, launch_dependents, load_idx, load_q, load_tile,
                           not_finite, page_shift, qk_scale, require_sm90, scale_q_per_head, softmax_step, store_partial,
                           two_scope_constexprs)

ALLOWED = dict(BLOCK_H=(16, 32, 64), BLOCK_T=(64,), num_warps=(8,), num_stages=(1,))
CONFIG_SPACE = [TiledConfig(BLOCK_H=bh, BLOCK_T=64, num_warps=8) for bh in ALLOWED["BLOCK_H"]]
NUM_WARPS = 8  # two warpgroups


def estimate_shared_bytes(c: TiledConfig, K_BUFFERS: int = 2, F16: int = 0, LEAVE_OUT: int = 0) -> int:
    """Shared bytes of one block, as the compiler allocates them (sm_90 lab, every rung's configs): K_BUFFERS
    16-bit K tiles (1 KB/token each), q (1 KB/head), P (2 B/token/head), S^T's change into the head-warp layout
    (4 B/token/head), and the valid bytes and rescale factors exchanged through shared memory (1 B/token,
    4 B/head). The rope is stored straight into the K tile; the epilogue's transposed accumulator reuses freed
    space. F16 and LEAVE_OUT move no shared bytes (f16 and bf16 are both 2 bytes); they are named so that a
    misspelled switch is a TypeError."""
    t, h = c.BLOCK_T, c.BLOCK_H
    return K_BUFFERS * 1024 * t + 1024 * h + 2 * t * h + 4 * t * h + t + 4 * h


@gluon.jit
def wgmma_partial_kernel(
    q_ptr,            # [b, s_q, h, 512] bf16, last stride 1
    stride_qb, stride_qs, stride_qh,
    cache_u8,         # the flat bytes of one cache
    stride_page, block_size, num_tokens,
    idx_ptr,          # [b, s_q, topk] int32
    stride_ib, stride_is,
    topk_len_ptr, stride_tl,  # [b] int32, any stride (read only when HAS_TOPK_LEN)
    # the extra scope (TWO_SCOPES: splits [splits_1, grid) read it; else scope 1's arguments stand in, unread)
    x_cache_u8, x_stride_page, x_block_size, x_num_tokens,
    x_idx_ptr,        # [b, s_q, x_topk] int32
    x_stride_ib, x_stride_is,
    x_topk_len_ptr, x_stride_tl,  # [b] int32 (read only when X_HAS_TOPK_LEN)
    X_TOPK, x_tokens_per_split, splits_1,
    bs_shift, x_bs_shift,  # log2 of each scope's page size (read only when BS_SHIFT == BS_SHIFT_RUNTIME)
    part_out_ptr,     # [b*s_q, h, s_total, 512] fp32
    part_lse_ptr,     # [b*s_q, h, s_total] fp32, base 2 (DIRECT: out [b, s_q, h, 512] bf16 and lse [b, h, s_q] fp32)
    sink_ptr, stride_sink,  # [h] fp32, any stride (read only when DIRECT and HAS_SINK)
    sm_scale_log2,
    H, S_Q, TOPK, split_offset, tokens_per_split, s_total,
    HAS_TOPK_LEN: gl.constexpr,
    D_NOPE: gl.constexpr, D_ROPE: gl.constexpr, TILE: gl.constexpr, DATA_BYTES: gl.constexpr,
    SCALE_BYTES: gl.constexpr,
    BLOCK_H: gl.constexpr, BLOCK_T: gl.constexpr, BS_SHIFT: gl.constexpr,
    K_BUFFERS: gl.constexpr,           # 2: PV of one tile overlaps the next tile's store; 1: half the shared memory
    F16: gl.constexpr,                 # 1: K, q and P in f16 (K by the hardware e4m3x2 -> f16x2 convert), bf16 rerun
    LEAVE_OUT: gl.constexpr = 0,       # measurement only: stages dropped from the loop (LEAVE_OUT_BITS); wrong output
    HAS_SINK: gl.constexpr = False,
    DIRECT: gl.constexpr = False,      # one split in all: write out and lse as the combine would (epilogue_args)
    TWO_SCOPES: gl.constexpr = False,  # both KV scopes in this one launch: no second partial launch to wait for
    X_HAS_TOPK_LEN: gl.constexpr = False,
):
    KT: gl.constexpr = gl.float16 if F16 else gl.bfloat16  # the MMA operands' type: K, q, P
    D: gl.constexpr = D_NOPE + D_ROPE
    PT_SMEM: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, BLOCK_T], KT)
    V_SMEM: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])
    K_SMEM: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16)
    Q_SMEM: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, D], KT)

    q_smem = gl.allocate_shared_memory(KT, [BLOCK_H, D], Q_SMEM)
    k_smem = gl.allocate_shared_memory(KT, [K_BUFFERS, BLOCK_T, D], K_SMEM)
    # P stored head-major: a thread's TT tokens of its head are contiguous; the PV reads P^T
    pt_smem = gl.allocate_shared_memory(KT, [BLOCK_H, BLOCK_T], PT_SMEM)
    p_smem = pt_smem.permute((1, 0))
    valid_smem = gl.allocate_shared_memory(gl.int8, [BLOCK_T], V_SMEM)
    alpha_smem = gl.allocate_shared_memory(gl.float32, [BLOCK_H], V_SMEM)

    pid_h = gl.program_id(0)
    split = gl.program_id(1)
    pid_q = gl.program_id(2)
    m_i, l_i, acc = split_pass(
        pid_h, split, pid_q, q_smem, k_smem, p_smem, pt_smem, valid_smem, alpha_smem, q_ptr, stride_qb, stride_qs,
        stride_qh, cache_u8, stride_page, block_size, num_tokens, idx_ptr, stride_ib, stride_is, topk_len_ptr,
        stride_tl, sm_scale_log2, H, S_Q, TOPK, tokens_per_split, HAS_TOPK_LEN, x_cache_u8, x_stride_page,
        x_block_size, x_num_tokens, x_idx_ptr, x_stride_ib, x_stride_is, x_topk_len_ptr, x_stride_tl, X_TOPK,
        x_tokens_per_split, splits_1, bs_shift, x_bs_shift, X_HAS_TOPK_LEN, TWO_SCOPES, D_NOPE, D_ROPE, TILE,
        DATA_BYTES, SCALE_BYTES, BLOCK_H, BLOCK_T, BS_SHIFT, K_BUFFERS, F16, LEAVE_OUT)
    # the combine, when launched as a programmatic dependent (decode.combine_pdl), may be scheduled once every block
    # is here: its launch overlaps this epilogue (and a bf16 pass, if one follows), and it waits
    # (griddepcontrol.wait) for the whole grid before reading the partials. Here, not at the kernel's start: waiting
    # combine blocks beside running ones made the production shape 3% slower (exploratory H200 run). No effect on
    # an ordinary launch
    launch_dependents()
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
                stride_qb, stride_qs, stride_qh, cache_u8 + z, stride_page, block_size, num_tokens, idx_ptr + z,
                stride_ib, stride_is, topk_len_ptr, stride_tl, sm_scale_log2, H, S_Q, TOPK, tokens_per_split,
                HAS_TOPK_LEN, x_cache_u8 + z, x_stride_page, x_block_size, x_num_tokens, x_idx_ptr + z, x_stride_ib,
                x_stride_is, x_topk_len_ptr, x_stride_tl, X_TOPK, x_tokens_per_split, splits_1, bs_shift, x_bs_shift,
                X_HAS_TOPK_LEN, TWO_SCOPES, D_NOPE, D_ROPE, TILE, DATA_BYTES, SCALE_BYTES, BLOCK_H, BLOCK_T,
                BS_SHIFT, K_BUFFERS, 0, LEAVE_OUT)
    store_partial(m_i, l_i, acc, out_mult, part_out_ptr, part_lse_ptr, pid_q, pid_h, split, split_offset, s_total,
                  H, S_Q, sink_ptr, stride_sink, BLOCK_H, D, HAS_SINK, DIRECT)


@gluon.jit
def split_pass(pid_h, split, pid_q, q_smem, k_smem, p_smem, pt_smem, valid_smem, alpha_smem, q_ptr, stride_qb,
               stride_qs, stride_qh, cache_u8, stride_page, block_size, num_tokens, idx_ptr, stride_ib, stride_is,
               topk_len_ptr, stride_tl, sm_scale_log2, H, S_Q, TOPK, tokens_per_split, HAS_TOPK_LEN: gl.constexpr,
               x_cache_u8, x_stride_page, x_block_size, x_num_tokens, x_idx_ptr, x_stride_ib, x_stride_is,
               x_topk_len_ptr, x_stride_tl, X_TOPK, x_tokens_per_split, splits_1, bs_shift, x_bs_shift,
               X_HAS_TOPK_LEN: gl.constexpr, TWO_SCOPES: gl.constexpr, D_NOPE: gl.constexpr, D_ROPE: gl.constexpr,
               TILE: gl.constexpr, DATA_BYTES: gl.constexpr, SCALE_BYTES: gl.constexpr, BLOCK_H: gl.constexpr,
               BLOCK_T: gl.constexpr, BS_SHIFT: gl.constexpr, K_BUFFERS: gl.constexpr, F16: gl.constexpr,
               LEAVE_OUT: gl.constexpr):
    """One pass over the block's split (:func:`attend`), from its program ids and the kernel's arguments alone, so a
    second pass keeps nothing of the first live across its loop. TWO_SCOPES: splits from splits_1 on are the
    extra scope's, whose arguments replace scope 1's as scalars, so one copy of the loop serves both."""
    bi = pid_q // S_Q
    si = pid_q % S_Q
    end_all = TOPK
    if HAS_TOPK_LEN:
        end_all = gl.minimum(gl.load(topk_len_ptr + bi * stride_tl), TOPK)
    if TWO_SCOPES:
        x_end_all = X_TOPK
        if X_HAS_TOPK_LEN:
            x_end_all = gl.minimum(gl.load(x_topk_len_ptr + bi * x_stride_tl), X_TOPK)
        extra = split >= splits_1
        split = gl.where(extra, split - splits_1, split)
        end_all = gl.where(extra, x_end_all, end_all)
        tokens_per_split = gl.where(extra, x_tokens_per_split, tokens_per_split)
        cache_u8 = gl.where(extra, x_cache_u8, cache_u8)
        stride_page = gl.where(extra, x_stride_page, stride_page)
        block_size = gl.where(extra, x_block_size, block_size)
        num_tokens = gl.where(extra, x_num_tokens, num_tokens)
        idx_ptr = gl.where(extra, x_idx_ptr, idx_ptr)
        stride_ib = gl.where(extra, x_stride_ib, stride_ib)
        stride_is = gl.where(extra, x_stride_is, stride_is)
        bs_shift = gl.where(extra, x_bs_shift, bs_shift)
    start = split * tokens_per_split
    end = gl.minimum(start + tokens_per_split, end_all)
    return attend(q_smem, k_smem, p_smem, pt_smem, valid_smem, alpha_smem, q_ptr + bi * stride_qb + si * stride_qs,
                  stride_qh, pid_h, H, sm_scale_log2, cache_u8, stride_page, block_size, bs_shift, num_tokens,
                  idx_ptr + bi * stride_ib + si * stride_is, start, end, D_NOPE, D_ROPE, TILE, DATA_BYTES, SCALE_BYTES,
                  BLOCK_H, BLOCK_T, BS_SHIFT, K_BUFFERS, F16, LEAVE_OUT)


@gluon.jit
def opaque_zero():
    """0, from a side-effecting asm the compiler cannot see through: added to a second pass's program ids and
    pointers, it keeps every value that pass derives from them from being merged with the first pass's, which
    would keep those values live (and spilled) across the first pass's loop."""
    return gl.inline_asm_elementwise("mov.u32 $0, 0;", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def attend(q_smem, k_smem, p_smem, pt_smem, valid_smem, alpha_smem, q_row, stride_qh, pid_h, H, sm_scale_log2,
           cache_u8, stride_page, block_size, bs_shift, num_tokens, idx_row, start, end, D_NOPE: gl.constexpr,
           D_ROPE: gl.constexpr, TILE: gl.constexpr, DATA_BYTES: gl.constexpr, SCALE_BYTES: gl.constexpr,
           BLOCK_H: gl.constexpr, BLOCK_T: gl.constexpr, BS_SHIFT: gl.constexpr, K_BUFFERS: gl.constexpr,
           F16: gl.constexpr, LEAVE_OUT: gl.constexpr):
    """The main loop over one split's tiles [start, end), run by every warp of the block (two warpgroups): gather,
    dequantise into K buffer `buf`, QK, online softmax, PV. q_smem holds q * 2**-E in the operands' type; qk_scale
    [BLOCK_H] turns scores into log2 units.

    Returns (m_i, l_i [BLOCK_H], O^T [D, BLOCK_H] fp32 unnormalised). With F16, a valid token outside the f16
    window makes l_i or O^T non-finite (see gluon_common.F16_MIN_SCALE_BYTE): :func:`not_finite` tells the caller
    to run the split again with bf16 operands, which are exact for every cache.
    """
    NW: gl.constexpr = gl.num_warps()
    KT: gl.constexpr = gl.float16 if F16 else gl.bfloat16
    D: gl.constexpr = D_NOPE + D_ROPE
    G: gl.constexpr = SCALE_BYTES  # 8 column groups of TILE: 7 fp8 nope tiles and the rope
    W: gl.constexpr = TILE // 4  # int32 words of one fp8 group
    # [BLOCK_T, G, W] raw words (4 fp8 each), 16 B per load, 64 B of a group contiguous over 4 lanes. Each lane
    # sharing a token repeats its index and address arithmetic, so 4 lanes a token (each taking 8 of its groups)
    # means BLOCK_T * 4 / (32 * NW) tokens per thread: 2 of a 64-token tile
    L3: gl.constexpr = gl.BlockedLayout([1, 8, 4], [8, 1, 4], [NW, 1, 1], [2, 1, 0])
    ROWS: gl.constexpr = gl.SliceLayout(1, gl.SliceLayout(2, L3))        # [BLOCK_T]
    GRP2: gl.constexpr = gl.SliceLayout(2, L3)                           # [BLOCK_T, G]
    KW: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=32)
    # S^T [BLOCK_T, BLOCK_H]: the warpgroups take a share of the heads each
    SL: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, NW // 4],
                                                 instr_shape=[16, BLOCK_H // (NW // 4), 16])
    # O^T [D, BLOCK_H]: the warpgroups take alternate 64-row blocks of the output columns
    OL: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                 instr_shape=[16, BLOCK_H, 16])
    # the softmax's S^T [BLOCK_T, BLOCK_H], one head per lane column, so a head's BLOCK_T tokens sit in one warp
    # (BLOCK_H // NW heads a warp, TT tokens a thread): the max over tokens is in-thread plus a few shuffles
    TT: gl.constexpr = BLOCK_T * BLOCK_H // (32 * NW)
    SB: gl.constexpr = gl.BlockedLayout([TT, 1], [BLOCK_T // TT, 32 * TT // BLOCK_T], [1, NW], [0, 1])
    HL: gl.constexpr = gl.SliceLayout(0, SB)  # [BLOCK_H] of the softmax

    g = gl.arange(0, G, layout=gl.SliceLayout(0, GRP2))
    g3 = gl.expand_dims(gl.expand_dims(g, 0), 2)  # [1, G, 1]
    w3 = gl.expand_dims(gl.expand_dims(gl.arange(0, W, layout=gl.SliceLayout(0, gl.SliceLayout(1, L3))), 0), 1)
    cache_w = cache_u8.to(gl.pointer_type(gl.int32), bitcast=True)
    cache_d = cache_u8.to(gl.pointer_type(gl.int64), bitcast=True)
    is_rope = g3 == G - 1
    QL: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [NW, 1], [1, 0])   # [BLOCK_H, D] bf16

    # software pipeline: indices two tiles ahead, bytes one tile ahead of the tile being dequantised
    idx = load_idx(idx_row, start, end, BLOCK_T, ROWS)
    words, rope, sbyte, valid = load_tile(cache_w, cache_d, cache_u8, idx, start, end, num_tokens, stride_page,
                                          block_size, g, g3, w3, D_NOPE, DATA_BYTES, SCALE_BYTES, W, BLOCK_T, ROWS,
                                          BS_SHIFT, bs_shift)
    idx = load_idx(idx_row, start + BLOCK_T, end, BLOCK_T, ROWS)
    # q while the first tile's bytes are in flight; stored before the loop's first barrier, which the QK follows
    q = load_q(q_row, stride_qh, pid_h, H, BLOCK_H, D, QL)
    if F16:  # each head's largest |q| in [2**14, 2**15)
        q, q_exp = scale_q_per_head(q)
    else:  # bf16 holds any q as it is (and a scaled q could overflow the fp32 scores against a huge K)
        q_exp = gl.zeros([BLOCK_H], gl.int32, layout=gl.SliceLayout(1, QL))
    q_smem.store(q.to(KT))
    scale = gl.convert_layout(qk_scale(sm_scale_log2, q_exp, F16), HL)

    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=HL)
    l_t = gl.zeros([BLOCK_T, BLOCK_H], gl.float32, layout=SB)  # per-thread row sums, reduced at the end
    acc = warpgroup_mma_init(gl.zeros([D, BLOCK_H], gl.float32, layout=OL))  # carried as an async result
    s_zero = gl.zeros([BLOCK_T, BLOCK_H], gl.float32, layout=SL)
    buf = 0
    for t0 in range(start, end, BLOCK_T):
        # dequantise the tile in hand into K buffer `buf` (the other buffer may still feed the last PV)
        if LEAVE_OUT & 2:  # no dequant, but still waits on the words: f16 1.0 or 0 in every half
            lo = words & 0x3C003C00
            hi = lo
        elif F16:
            lo, hi = dequant_words_f16(words, gl.expand_dims(f16_scale_pairs(sbyte), 2))
        else:
            lo, hi = dequant_words(words, gl.expand_dims(bf16_scale_pairs(sbyte), 2))
        kb = k_smem.index(buf)
        if K_BUFFERS == 1:  # the last PV still reads the one buffer
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
            # ... and so does the other warpgroup's (its half of the output columns, every token), which the wait
            # above does not retire, while this thread stores every column of its tokens. Triton's membar pass
            # puts a barrier here by itself (same PTX without this line); written out so the hazard does not
            # rest on that analysis (tests/test_resources_gluon.py reads the order in the PTX)
            gl.thread_barrier()
        # group G-1's outputs are the rope's pairs, as the same thread loaded them
        if F16:
            rlo, rhi = bf16x4_to_f16(rope)
        else:
            rlo = rope.to(gl.int32)
            rhi = (rope >> 32).to(gl.int32)
        lo = gl.where(is_rope, rlo, lo)
        hi = gl.where(is_rope, rhi, hi)
        kb._reinterpret(gl.int32, [BLOCK_T, D // 2], KW).store(gl.reshape(gl.join(lo, hi), [BLOCK_T, D // 2]))
        valid_smem.store(valid.to(gl.int8))  # read back in the softmax's layout after the barrier below
        # the next tile's gathers are in flight during this tile's MMAs and softmax
        if not LEAVE_OUT & 1:  # (no loads: every tile reuses the first tile's bytes)
            words, rope, sbyte, valid = load_tile(cache_w, cache_d, cache_u8, idx, t0 + BLOCK_T, end, num_tokens,
                                                  stride_page, block_size, g, g3, w3, D_NOPE, DATA_BYTES,
                                                  SCALE_BYTES, W, BLOCK_T, ROWS, BS_SHIFT, bs_shift)
            idx = load_idx(idx_row, t0 + 2 * BLOCK_T, end, BLOCK_T, ROWS)
        fence_async_shared()
        gl.thread_barrier()
        if LEAVE_OUT & 8:  # no QK MMA: constant scores; the last PV is still retired here
            s = s_zero + 1.0
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        else:
            s = warpgroup_mma(kb, q_smem.permute((1, 0)), s_zero, use_acc=False, is_async=True)  # [BLOCK_T, BLOCK_H]
            s, acc = warpgroup_mma_wait(num_outstanding=0, deps=(s, acc))  # also retires the last PV
        s = gl.convert_layout(s, SB)
        v = valid_smem.load(gl.SliceLayout(1, SB)) != 0
        p, alpha, m_i = softmax_step(s, v, m_i, scale, F16, LEAVE_OUT & 4)
        l_t = l_t * gl.expand_dims(alpha, 0) + p
        # the last PV of the other warpgroup reads P too: it was retired before the barrier inside the
        # convert_layout above, so this store cannot overwrite P under it
        pt_smem.store(gl.permute(p.to(KT), (1, 0)))
        alpha_smem.store(alpha)  # applied to the accumulator after the barrier below
        fence_async_shared()
        gl.thread_barrier()
        acc = acc * gl.expand_dims(alpha_smem.load(gl.SliceLayout(0, OL)), 0)
        if LEAVE_OUT & 16:  # no PV MMA: the accumulator keeps its rescaled zeros (as the loop carries it)
            acc = warpgroup_mma_init(acc)
        else:
            acc = warpgroup_mma(kb.permute((1, 0)), p_smem, acc, is_async=True)  # O^T += K^T P^T
        buf = (buf + 1) % K_BUFFERS
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    l_i = gl.sum(l_t, 0)
    return m_i, l_i, acc


def default_config(heads: int, allowed: dict = ALLOWED) -> TiledConfig:
    """The head group that covers ``heads`` in one program where ``allowed`` lets it (else the largest)."""
    return TiledConfig(BLOCK_H=min(max(allowed["BLOCK_H"]), head_group(heads)), BLOCK_T=64,
                       num_warps=NUM_WARPS)


def launch_wgmma_partial(*, q, cache, indices, topk_length, part_out, part_lse, split_offset, num_splits,
                         tokens_per_split, sm_scale, name, allowed=ALLOWED, config=None, maxnreg=None, direct=False,
                         attn_sink=None, extra_cache=None, extra_indices=None, extra_topk_length=None,
                         extra_num_splits=0, extra_tokens_per_split=0, **switches):
    """Run the Gluon partial kernel for one KV scope into splits [split_offset, split_offset+num_splits) (direct:
    part_out and part_lse are the call's out and lse, see gluon_common.epilogue_args); with extra_cache, for both
    scopes in one launch: the extra scope's extra_num_splits splits of extra_tokens_per_split tokens follow the
    first's.

    name, allowed: the registered rung's name and config table; maxnreg: ptxas's register cap (None: no cap);
    switches: the rung's constexprs (K_BUFFERS, F16; LEAVE_OUT for a measurement).
    """
    require_sm90(q, name)
    b, s_q, h, _ = q.shape
    cfg = default_config(h, allowed) if config is None else TiledConfig.from_any(config, allowed, name)
    args = split_args(q=q, cache=cache, indices=indices, topk_length=topk_length, part_out=part_out,
                      part_lse=part_lse, split_offset=split_offset, tokens_per_split=tokens_per_split,
                      sm_scale=sm_scale)
    args.update(epilogue_args(part_lse=part_lse, direct=direct, attn_sink=attn_sink, num_splits=num_splits))
    two = extra_cache is not None
    if two and direct:
        raise ValueError("direct: a launch over two scopes has two splits at least, so a combine")
    if two and (extra_num_splits < 1 or extra_tokens_per_split < 1):
        raise ValueError(f"extra_num_splits, extra_tokens_per_split: an extra scope needs a split of a token at "
                         f"least, got {extra_num_splits} and {extra_tokens_per_split}")
    shift = page_shift(cache)
    # the extra scope's arguments; with one scope, unread stand-ins: scope 1's own
    x_cache, x_indices, x_tokens = (extra_cache, extra_indices, extra_tokens_per_split) if two else \
        (cache, indices, tokens_per_split)
    args.update(scope_args("x_", x_cache, x_indices, extra_topk_length if two else topk_length, views=("cache_u8",)),
                X_TOPK=x_indices.shape[2], x_tokens_per_split=x_tokens, x_bs_shift=page_shift(x_cache),
                X_HAS_TOPK_LEN=two and extra_topk_length is not None)
    args.update(splits_1=num_splits, bs_shift=shift, TWO_SCOPES=two)
    constexprs = two_scope_constexprs(cache, extra_cache) if two else cache_constexprs(cache)
    grid = (cdiv(h, cfg.BLOCK_H), num_splits + (extra_num_splits if two else 0), b * s_q)
    launch(wgmma_partial_kernel, grid, dict(**args, **constexprs, BLOCK_H=cfg.BLOCK_H, BLOCK_T=cfg.BLOCK_T,
                                            num_warps=NUM_WARPS, maxnreg=maxnreg, **switches))
