"""Rung "portable_ws_h32t": rung 23 (``portable_ws_h32r``, removed; runnable at db69d6c) with QK split as 4 column
groups of 128 by 2 token halves instead of 8 column groups of 64 by the whole tile, so that half as many partial
scores meet in shared memory.

ncu of rung 23 at b64 h64 (8431ecd) left its consumer on the tile's serial chain, and the exchange of 8 partial
scores a head-token (32 KB of fp32 stored and loaded a tile, most of the block's shared traffic) is in that chain.
Here consumer warp b = half * 4 + g4 scores all 32 heads against the 16 tokens of its half over the 128 columns of
scale groups 2 g4 and 2 g4 + 1: two MMAs of K = 64 (the parities), each with its own A operand of q held in
registers for the whole split (32 a thread each, 64 in all against rung 23's 32), still 32 HMMA a warp a tile. A
head-token's score is the sum of 4 partials, not 8: [8, 32, 16] fp32, 16 KB in q's slot, of which the rest stays
unused. The reduction gives warp w heads 4w..4w+3 over both halves (4 partials of 4 tokens a thread, 16-byte
loads), so a head's online softmax stays whole in one warp; P is stored as [2 halves x 32 heads, 16] bf16 rows, and
PV is rung 23's, by 8 column groups of 64, as two MMAs of K = 16, one a half (the A operand a half's 32 rows of P).

The slot is stored by the producer (``portable_ws._producer``) as 16 planes [half x 8 + group, 16 tokens, 64
columns], so that both MMAs read it through affine views: QK's batch b takes planes 2b and 2b + 1 (one [32, 64]
block: groups 2 g4 and 2 g4 + 1 of half b // 4), seen transposed and sliced by parity; PV's batch w takes plane w of
each half. (Slicing the [16, 16, 64] view before the permute, the obvious spelling, trips an assertion in Triton
3.6's shared-layout code; the reinterpret to [8, 32, 64] first does not.)

Everything else is rung 23's: the slot of tile i handed back after the first barrier of tile i + 1, two partition
barriers a tile in the source, 2 K slots of 32 tokens, one block of 12 warps per SM (4 producer warps at 96
registers, the consumer's 8 at (12 x MAXNREG - 4 x 96) / 8 rounded down to a multiple of 8: 200), the epilogue,
invalid tokens and padding heads.

Per tile a consumer warp reads 4 KB of K, 4 KB of V, 2 KB of P and 2 KB of partial scores, and writes 2 KB of
scores: 14 KB, 112 KB for the block (rung 23: 144 KB).

Shapes it assumes, pinned by ALLOWED rather than asserted in the kernel: 8 consumer warps, 32 heads, 32 tokens a
tile (the scores [8, 32, 16] fp32 fit q's slot [8, 32, 64] bf16, and the reduction's layout is written for them),
and one consumer warp per scale group (the DS == TILE assert). GPU only: Gluon does not run under the interpreter.

Rung "portable_ws_h32p" is this kernel with P_PAIR: PV multiplies P as a pair of bf16, hi = bf16(P) and lo = bf16(P -
hi), each against the same V fragments (32 more HMMA a warp a tile; lo lives in the half of q's slot that the
partial scores leave unused, so the shared bytes are the same). bf16 P alone rounds a token's weight by up to 2^-9;
on data where one token's large V dominates the output while an earlier token of its split holds the running
maximum, that rounding is the output's error, and longer splits make it likelier (docs/decisions.md). The pair
takes P to ~2^-17, so that rung can run its split plan on its own 32-head programs (fewer, longer splits). It also
costs two more bar.sync a tile: Triton's barrier pass sees lo as part of q's buffer, where the partial scores live,
though neither access needs one (tests/test_portable_ws_h32t.py counts them).

Rung "portable_ws_h32f" is this kernel with F16, on rung 25's plan: K, q and P in f16 with wgmma_f16's window (the
producer's hardware e4m3x2 -> f16x2 dequant, q scaled per head by a power of two, the scores scaled back), one f16 P
8x finer than bf16's. A split whose row sums come out non-finite (a token outside the window, or NaN in the data)
runs again as rung 25's pass (bf16, P as a pair) in a second warp-specialised region over the same buffers, and
every store of the first pass is written again. Plan for plan it took 6-7% more than rung 24 on the H200 (ncu at
875fc90: the consumer's HMMAs wait longer on their ldmatrix operands; docs/decisions.md, rung 26). The lab (sm_90
SASS, compiled on a CPU) points to why: with the rerun compiled after it, the f16 pass's consumer loop has 8 NOPs
between its HMMAs and issues 2 of QK's 4 K loads (LDSM) before the first (287 instructions), where the same pass
compiled with no rerun has 1 NOP, as rung 24 does (279). Both regions' consumers are inlined into one function, so
LLVM merges the rerun's q-loading addresses with the f16 pass's and keeps them live across the f16 pass's loop. The
rerun (FIRST_PASS false) therefore loads q in a layout of its own, whose addresses cannot be merged: as a call of one
split (DIRECT) the f16 loop compiles to 277 instructions, 1 NOP, all 4 loads ahead (286, 8, 2 before); as a call of
several splits to 279, 3 NOPs, 2 ahead, so there part of the effect remains (how many loads go ahead also moves with
ptxas's schedule: the pass alone, as one split, issues 2). The lab's compile spills nothing on sm_120 (nor in the
three other variants compiled there: one split, with a sink and topk_length) and sm_90 (12 B before) and 12 B on
sm_100 (20); a call of one split on sm_90 keeps 4-8 B of the epilogue's addresses for the rerun, stored once a
program, outside every loop. Rungs 24 and 25 compile to the same SASS as before. Not yet timed on a GPU.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mbarrier, mma_v2

from .configs import TiledConfig
from .gluon_common import (F16_OUT_MULT, head_exponent, launch_dependents, load_q, not_finite, pow2, qk_scale,
                           split_lse2, store_lse)
from .portable_ws import LAB_ARCHS, _producer, launch_portable_partial  # noqa: F401 - LAB_ARCHS: read by the lab

ALLOWED = dict(BLOCK_H=(32,), BLOCK_T=(32,), num_warps=(8,), num_stages=(1,))
CONFIG_SPACE = [TiledConfig(BLOCK_H=32, BLOCK_T=32, num_warps=8)]
SWITCHES = dict(NUM_BUFS=2, PRODUCER_WARPS=4, PRODUCER_REGS=96)
# The two exchange buffers' swizzles, chosen against the accesses that hit them (bank = 4-byte word mod 32). Each is
# also written down as the rank-3/rank-4 view it is reached through: the phase comes from the row within the last
# two dims, and every leading dim spans a multiple of the phase's period, so both views place every element alike.
# - the partial scores [CW, BLOCK_H, TH] fp32, 64-byte rows: the MMA layout stores 8 B a thread, a half-warp 4 rows
#   x 32 B at the same columns, and rows r and r + 2 share banks; 32-byte units XOR'd with (row // 2) % 2 put the 4
#   rows in 4 distinct quarters of the banks. The reduction's 16-byte loads read whole rows, free under any
#   permutation within a row.
S_SMEM = gl.constexpr(gl.SwizzledSharedLayout(8, 2, 2, order=[2, 1, 0]))
S4_SMEM = gl.constexpr(gl.SwizzledSharedLayout(8, 2, 2, order=[3, 2, 1, 0]))   # [2, CW // 2, BLOCK_H, TH]
# - P [2 * BLOCK_H, TH] bf16, 32-byte rows, four to a 128-byte line: ldmatrix (the A operand) reads 8 rows x 16 B at
#   the same columns a phase; 16-byte units XOR'd with (row // 4) % 2 give the 8 rows 8 distinct 16-byte bank groups.
P_SMEM = gl.constexpr(gl.SwizzledSharedLayout(8, 4, 2, order=[1, 0]))
P3_SMEM = gl.constexpr(gl.SwizzledSharedLayout(8, 4, 2, order=[2, 1, 0]))     # [2, BLOCK_H, TH]: the softmax's
MAXNREG = 168  # one block of 12 warps per SM: 65536 / 384 threads, rounded down to a multiple of 8


def estimate_shared_bytes(c: TiledConfig, NUM_BUFS: int = 2, PRODUCER_WARPS: int = 4, PRODUCER_REGS: int = 96,
                          P_PAIR: bool = False, F16: bool = False) -> int:
    """Shared bytes of one block: NUM_BUFS bf16 K slots (1 KB a token) with their valid bytes and two mbarriers
    each, q (1 KB a head; the partial scores reuse it: CW x heads x half a tile's tokens fp32, 16 KB at 32 heads, 32
    tokens and 8 warps; P_PAIR's low P takes 2 KB of the other half), P in bf16 (2 B a head-token), the factors
    (4 B a head) and 256 B for the region's own words, rounded up to 128 B. F16 views the same buffers as f16."""
    t, h = c.BLOCK_T, c.BLOCK_H
    total = NUM_BUFS * (1024 * t + t + 16) + max(1024 * h, 2 * c.num_warps * h * t) + 2 * h * t + 4 * h + 256
    return -(-total // 128) * 128


@gluon.jit
def portable_ws_h32t_partial_kernel(
    q_ptr,            # [b, s_q, h, 512] bf16, last stride 1
    stride_qb, stride_qs, stride_qh,
    cache_u8,         # the flat bytes of one cache
    stride_page, block_size, num_tokens,
    idx_ptr,          # [b, s_q, topk] int32
    stride_ib, stride_is,
    topk_len_ptr, stride_tl,  # [b] int32, any stride (read only when HAS_TOPK_LEN)
    part_out_ptr,     # [b*s_q, h, s_total, 512] fp32
    part_lse_ptr,     # [b*s_q, h, s_total] fp32, base 2 (DIRECT: out [b, s_q, h, 512] bf16 and lse [b, h, s_q] fp32)
    sink_ptr, stride_sink,  # [h] fp32, any stride (read only when DIRECT and HAS_SINK)
    sm_scale_log2,
    H, S_Q, TOPK, split_offset, tokens_per_split, s_total,
    HAS_TOPK_LEN: gl.constexpr,
    D_NOPE: gl.constexpr, D_ROPE: gl.constexpr, TILE: gl.constexpr, DATA_BYTES: gl.constexpr,
    SCALE_BYTES: gl.constexpr,
    BLOCK_H: gl.constexpr, BLOCK_T: gl.constexpr, BS_SHIFT: gl.constexpr,
    NUM_BUFS: gl.constexpr,            # K slots in the ring
    PRODUCER_WARPS: gl.constexpr,      # warps of the producer partition: 8 tokens each
    PRODUCER_REGS: gl.constexpr,       # its registers per thread (setmaxnreg); the consumer gets the rest
    HAS_SINK: gl.constexpr = False,
    DIRECT: gl.constexpr = False,      # one split in all: write out and lse as the combine would (epilogue_args)
    P_PAIR: gl.constexpr = False,      # P as a bf16 pair (hi + lo) in PV: rung portable_ws_h32p
    F16: gl.constexpr = False,         # K, q and P in f16 (wgmma_f16's window), a P_PAIR rerun: portable_ws_h32f
):
    D: gl.constexpr = D_NOPE + D_ROPE
    CW: gl.constexpr = gl.num_warps()   # consumer warps, one column group each
    DS: gl.constexpr = D // CW          # a warp's columns: the producer's scale group
    gl.static_assert(DS == TILE, "one consumer warp per scale group")
    # [planes, rows, DS] bf16 (the slot's planes, q's groups): one 128-byte row a (plane, row), 128-byte swizzle:
    # conflict-free ldmatrix both ways
    G_SMEM: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=3)
    V_SMEM: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])
    pid_h = gl.program_id(0)
    split = gl.program_id(1)
    pid_q = gl.program_id(2)
    bi = pid_q // S_Q
    si = pid_q % S_Q

    # the slots by plane half * CW + group [16 tokens, DS]: the producer's layout for both MMAs' views
    k_smem = gl.allocate_shared_memory(gl.bfloat16, [NUM_BUFS, 2 * CW, BLOCK_T // 2, DS], G_SMEM)
    q_smem = gl.allocate_shared_memory(gl.bfloat16, [CW, BLOCK_H, DS], G_SMEM)  # then the partial scores
    p_smem = gl.allocate_shared_memory(gl.bfloat16, [2 * BLOCK_H, BLOCK_T // 2], P_SMEM)  # [half, head] rows
    a_smem = gl.allocate_shared_memory(gl.float32, [BLOCK_H], V_SMEM)
    valid_smem = gl.allocate_shared_memory(gl.int8, [NUM_BUFS, BLOCK_T], V_SMEM)
    full = gl.allocate_shared_memory(gl.int64, [NUM_BUFS, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_BUFS, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_BUFS):
        mbarrier.init(full.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    gl.thread_barrier()  # the barriers' init before either partition uses them

    end_all = TOPK
    if HAS_TOPK_LEN:
        end_all = gl.minimum(gl.load(topk_len_ptr + bi * stride_tl), TOPK)
    start = split * tokens_per_split
    end = gl.minimum(start + tokens_per_split, end_all)
    idx_row = idx_ptr + bi * stride_ib + si * stride_is
    q_row = q_ptr + bi * stride_qb + si * stride_qs
    slot = (pid_q * H + pid_h * BLOCK_H) * s_total + split_offset + split  # the block's first head's partial

    gl.static_assert(not (F16 and P_PAIR), "F16's rerun is the P_PAIR pass")
    # what both passes take (tuples hold runtime values only: a constexpr in one comes out as a tensor)
    bufs = (q_smem, k_smem, valid_smem, p_smem, a_smem, full, empty)
    where = (start, end, q_row, stride_qh, pid_h, H, sm_scale_log2, part_out_ptr, part_lse_ptr, sink_ptr, stride_sink,
             pid_q, S_Q, slot, s_total, cache_u8, stride_page, block_size, num_tokens, idx_row)
    l_i, = _pass(bufs, where, D_NOPE, D_ROPE, TILE, DATA_BYTES, SCALE_BYTES, BLOCK_H, BLOCK_T, BS_SHIFT, NUM_BUFS,
                 PRODUCER_WARPS, PRODUCER_REGS, HAS_SINK, DIRECT, F16, P_PAIR, True)
    if F16:
        if not_finite(l_i):  # rare: a token outside the f16 window; the split again, exact for every cache (bf16,
            # P as a pair), over the same buffers: every store of the f16 pass is written again
            for i in gl.static_range(NUM_BUFS):
                mbarrier.invalidate(full.index(i))
                mbarrier.invalidate(empty.index(i))
                mbarrier.init(full.index(i), count=1)
                mbarrier.init(empty.index(i), count=1)
            gl.thread_barrier()
            _pass(bufs, where, D_NOPE, D_ROPE, TILE, DATA_BYTES, SCALE_BYTES, BLOCK_H, BLOCK_T, BS_SHIFT, NUM_BUFS,
                  PRODUCER_WARPS, PRODUCER_REGS, HAS_SINK, DIRECT, False, True, False)


@gluon.jit
def _pass(bufs, where, D_NOPE: gl.constexpr, D_ROPE: gl.constexpr, TILE: gl.constexpr, DATA_BYTES: gl.constexpr,
          SCALE_BYTES: gl.constexpr, BLOCK_H: gl.constexpr, BLOCK_T: gl.constexpr, BS_SHIFT: gl.constexpr,
          NUM_BUFS: gl.constexpr, PRODUCER_WARPS: gl.constexpr, PRODUCER_REGS: gl.constexpr, HAS_SINK: gl.constexpr,
          DIRECT: gl.constexpr, F16: gl.constexpr, P_PAIR: gl.constexpr, FIRST_PASS: gl.constexpr):
    """One pass over the split in both partitions, with the 16-bit buffers viewed as f16 (F16) or bf16; the
    consumer stores the split's partial and returns (its row sums [BLOCK_H],): non-finite, run the split again.
    FIRST_PASS: False for rung 26's rerun (the first pass signalled the combine's launch)."""
    q_smem, k_smem, valid_smem, p_smem, a_smem, full, empty = bufs
    (start, end, q_row, stride_qh, pid_h, H, sm_scale_log2, part_out_ptr, part_lse_ptr, sink_ptr, stride_sink, pid_q,
     S_Q, slot, s_total, cache_u8, stride_page, block_size, num_tokens, idx_row) = where
    KT: gl.constexpr = gl.float16 if F16 else gl.bfloat16
    CW: gl.constexpr = gl.num_warps()
    DS: gl.constexpr = (D_NOPE + D_ROPE) // CW
    G_SMEM: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=3)
    return gl.warp_specialize([
        (_consumer, (q_smem._reinterpret(KT, [CW, BLOCK_H, DS], G_SMEM),
                     k_smem._reinterpret(KT, [NUM_BUFS, 2 * CW, BLOCK_T // 2, DS], G_SMEM), valid_smem,
                     p_smem._reinterpret(KT, [2 * BLOCK_H, BLOCK_T // 2], P_SMEM), a_smem, full, empty, start, end,
                     q_row, stride_qh, pid_h, H, sm_scale_log2, part_out_ptr, part_lse_ptr, sink_ptr, stride_sink,
                     pid_q, S_Q, slot, s_total, BLOCK_H, BLOCK_T, D_NOPE + D_ROPE, NUM_BUFS, HAS_SINK, DIRECT, P_PAIR, F16,
                     FIRST_PASS)),
        (_producer, (k_smem, valid_smem, full, empty, cache_u8, stride_page, block_size, num_tokens, idx_row,
                     start, end, D_NOPE, D_ROPE, TILE, DATA_BYTES, SCALE_BYTES, BLOCK_T, BS_SHIFT, NUM_BUFS, F16)),
    ], [PRODUCER_WARPS], [PRODUCER_REGS])


@gluon.jit
def _load_q_operands(q_smem, q_row, stride_qh, pid_h, H, BLOCK_H: gl.constexpr, DS: gl.constexpr,
                     A_OP: gl.constexpr, F16: gl.constexpr, FIRST_PASS: gl.constexpr):
    """q's A operands for QK's two parities (batch b = half * 4 + g4 takes column group 2 * g4 + parity of every
    head: [CW, BLOCK_H, DS] in q_smem's type, 32 registers a thread each) and each head's exponent E [BLOCK_H]
    (F16: q scaled by 2**-E as wgmma_f16's, gluon_common.scale_q_per_head; else 0). A rerun (not FIRST_PASS) loads
    q in a layout of its own (4 lanes a head row, not 8), so that LLVM cannot merge its addresses with the first
    pass's and keep them live across that pass's loop (the module's docstring, rung 26)."""
    CW: gl.constexpr = gl.num_warps()
    if FIRST_PASS:
        QL: gl.constexpr = gl.BlockedLayout([1, 1, 8], [1, 4, 8], [CW, 1, 1], [2, 1, 0])
    else:
        QL: gl.constexpr = gl.BlockedLayout([1, 1, 8], [1, 8, 4], [CW, 1, 1], [2, 1, 0])
    QH: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(2, QL))  # [BLOCK_H], every head in every warp
    # [BLOCK_H, D] with a head's columns in one warp: its largest |q| by shuffles (a reduction across the column
    # groups' warps took 1 KB of shared scratch, which put the block over sm_120's limit)
    QA: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [CW, 1], [1, 0])
    if F16:
        q_exp = head_exponent(gl.max(gl.abs(load_q(q_row, stride_qh, pid_h, H, BLOCK_H, CW * DS, QA).to(gl.float32)),
                                     1))
        factor = gl.expand_dims(gl.expand_dims(gl.convert_layout(pow2(-q_exp), QH), 0), 2)
    else:
        q_exp = gl.zeros([BLOCK_H], gl.int32, layout=gl.SliceLayout(1, QA))
        factor = 1.0
    qb = gl.arange(0, CW, layout=gl.SliceLayout(1, gl.SliceLayout(2, QL)))
    qh3 = gl.expand_dims(gl.expand_dims(pid_h * BLOCK_H + gl.arange(0, BLOCK_H, layout=QH), 0), 2)
    qd = gl.arange(0, DS, layout=gl.SliceLayout(0, gl.SliceLayout(1, QL)))
    ptrs = q_row + qh3 * stride_qh + gl.expand_dims(gl.expand_dims(2 * (qb % 4) * DS, 1), 2) + \
        gl.expand_dims(gl.expand_dims(qd, 0), 1)  # parity 0; parity 1 is DS on
    gl.thread_barrier()  # a rerun's first store: every warp is past the last pass's reads of the slot
    q_a0 = _q_operand(q_smem, ptrs, qh3 < H, factor, A_OP, F16)
    gl.thread_barrier()  # every warp's reads of parity 0 before parity 1 overwrites the slot
    return q_a0, _q_operand(q_smem, ptrs + DS, qh3 < H, factor, A_OP, F16), q_exp


@gluon.jit
def _q_operand(q_smem, ptrs, mask, factor, A_OP: gl.constexpr, F16: gl.constexpr):
    """q's columns at ptrs [CW, BLOCK_H, DS] (F16: times factor, in f16) through q_smem as the A operand."""
    q = gl.load(ptrs, mask=mask, other=0.0)
    if F16:
        q = (q.to(gl.float32) * factor).to(gl.float16)
    q_smem.store(q)
    gl.thread_barrier()
    return q_smem.load(A_OP)


@gluon.jit
def _consumer(q_smem, k_smem, valid_smem, p_smem, a_smem, full, empty, start, end, q_row, stride_qh, pid_h, H,
              sm_scale_log2, part_out_ptr, part_lse_ptr, sink_ptr, stride_sink, pid_q, S_Q, slot, s_total,
              BLOCK_H: gl.constexpr, BLOCK_T: gl.constexpr, D: gl.constexpr, NUM_BUFS: gl.constexpr,
              HAS_SINK: gl.constexpr, DIRECT: gl.constexpr, P_PAIR: gl.constexpr, F16: gl.constexpr,
              FIRST_PASS: gl.constexpr):
    """QK by 4 column groups of 128 x 2 token halves (warp b = half * 4 + g4), the 4 partials of a half reduced by
    head, PV by 8 column groups of 64 over both halves; the partial stored; returns the row sums [BLOCK_H]."""
    KT: gl.constexpr = k_smem.dtype  # the MMA operands' type (F16: f16, else bf16)
    CW: gl.constexpr = gl.num_warps()
    DS: gl.constexpr = D // CW
    TH: gl.constexpr = BLOCK_T // 2
    G_SMEM: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=3)
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[CW, 1, 1], instr_shape=[1, 16, 8])
    A_OP: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    B_OP: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    # the reduction [half, g4, heads, TH]: warp w its 4 heads, 4 partials of 4 tokens a thread (16 B loads)
    RED: gl.constexpr = gl.BlockedLayout([1, 4, 1, 4], [2, 1, 4, 4], [1, 1, CW, 1], [3, 2, 1, 0])
    SM: gl.constexpr = gl.SliceLayout(1, RED)          # [2, BLOCK_H, TH]: the softmax's layout
    HEAD: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(2, SM))  # [BLOCK_H]
    TOK: gl.constexpr = gl.SliceLayout(1, SM)          # [2, TH]
    P2: gl.constexpr = gl.SliceLayout(0, A_OP)         # [BLOCK_H, TH]: P's half as every batch's A operand
    OROW: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(2, MMA))  # [BLOCK_H] in O's layout
    V2: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0])

    # q [CW, BLOCK_H, DS] twice, zero past the last head: through shared memory once a split (ldmatrix)
    q_a0, q_a1, q_exp = _load_q_operands(q_smem, q_row, stride_qh, pid_h, H, BLOCK_H, DS, A_OP, F16, FIRST_PASS)
    gl.thread_barrier()  # every warp has its q before the slot is reused for the scores
    scale = gl.expand_dims(gl.expand_dims(gl.convert_layout(qk_scale(sm_scale_log2, q_exp, F16), HEAD), 0), 2)
    s_smem = q_smem._reinterpret(gl.float32, [CW, BLOCK_H, TH], S_SMEM)
    s4_smem = q_smem._reinterpret(gl.float32, [2, CW // 2, BLOCK_H, TH], S4_SMEM)
    # P_PAIR: P's bf16 rounding error as a second P [2 * BLOCK_H, TH], in the half of q's slot the scores leave unused
    pl_smem = q_smem._reinterpret(gl.bfloat16, [4 * CW * BLOCK_H, TH], P_SMEM).slice(2 * CW * BLOCK_H, 2 * BLOCK_H)

    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=HEAD)
    l_t = gl.zeros([2, BLOCK_H, TH], gl.float32, layout=SM)  # the row sums' terms, by thread
    acc = gl.zeros([CW, BLOCK_H, DS], gl.float32, layout=MMA)  # O, warp w its columns
    s_zero = gl.zeros([CW, BLOCK_H, TH], gl.float32, layout=MMA)
    i = 0
    for t0 in range(start, end, BLOCK_T):
        buf = i % NUM_BUFS
        mbarrier.wait(full.index(buf), (i // NUM_BUFS) & 1)
        kb = k_smem.index(buf)  # [2 * CW, TH, DS] KT: plane half * CW + group
        kq = kb._reinterpret(KT, [CW, 2 * TH, DS], G_SMEM)  # batch b: planes 2b, 2b + 1
        kt = kq.permute((0, 2, 1))  # [CW, DS, 2 * TH]
        sp = mma_v2(q_a0, kt.slice(0, TH, dim=2).load(B_OP), s_zero)  # [CW, BLOCK_H, TH] fp32, group 2 g4
        sp = mma_v2(q_a1, kt.slice(TH, TH, dim=2).load(B_OP), sp)     # + group 2 g4 + 1
        s_smem.store(sp)
        gl.thread_barrier()
        if i > 0:  # every warp has stored this tile's scores, so it is past its reads of the last tile's slot
            mbarrier.arrive(empty.index((i - 1) % NUM_BUFS))
        ok = valid_smem.index(buf)._reinterpret(gl.int8, [2, TH], V2).load(TOK) != 0  # [2, TH]
        s = gl.sum(s4_smem.load(RED), 1)  # [2, BLOCK_H, TH]
        if F16:  # -inf (an f16 inf in K) would drop its token without a trace: NaN sends the split to the rerun
            s = gl.where(s == float("-inf"), float("nan"), s)
        s = gl.where(gl.expand_dims(ok, 1), s * scale, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(gl.max(s, 2), 0))
        alpha = gl.exp2(m_i - gl.where(m_new == float("-inf"), 0.0, m_new))  # no (-inf) - (-inf)
        m_i = m_new
        m_b = gl.expand_dims(gl.expand_dims(gl.where(m_i == float("-inf"), 0.0, m_i), 0), 2)
        p = gl.exp2(s - m_b)  # [2, BLOCK_H, TH] fp32
        l_t = l_t * gl.expand_dims(gl.expand_dims(alpha, 0), 2) + p
        p_hi = p.to(KT)
        p_smem._reinterpret(KT, [2, BLOCK_H, TH], P3_SMEM).store(p_hi)
        if P_PAIR:
            p_lo = (p - p_hi.to(gl.float32)).to(gl.bfloat16)
            pl_smem._reinterpret(gl.bfloat16, [2, BLOCK_H, TH], P3_SMEM).store(p_lo)
        a_smem.store(alpha)
        gl.thread_barrier()
        acc = acc * gl.expand_dims(gl.expand_dims(a_smem.load(OROW), 0), 2)
        # per half: P's 32 rows [BLOCK_H, TH] as every batch's A operand, plane w of the half as warp w's V (loaded
        # once for hi and lo)
        for hf in gl.static_range(2):
            vb = kb.slice(hf * CW, CW, dim=0).load(B_OP)
            acc = mma_v2(_p_operand(p_smem, hf, P2), vb, acc)
            if P_PAIR:
                acc = mma_v2(_p_operand(pl_smem, hf, P2), vb, acc)
        i += 1
    gl.thread_barrier()  # every warp's last reads of P and the factors before the epilogue reuses a_smem
    if FIRST_PASS:
        launch_dependents()

    # epilogue: the LSE by the head's warp; 1 / l (and DIRECT's factor, in P's slot) to every warp through shared
    # memory, the output by the columns' warp
    l_i = gl.sum(gl.sum(l_t, 2), 0)
    live, lse2 = split_lse2(m_i, l_i)
    heads = gl.arange(0, BLOCK_H, layout=HEAD)
    f = store_lse(lse2, live, pid_q, pid_h * BLOCK_H + heads, H, S_Q, part_lse_ptr, slot + heads * s_total, sink_ptr,
                  stride_sink, HAS_SINK, DIRECT)
    a_smem.store(gl.where(live, (F16_OUT_MULT if F16 else 1.0) / l_i, 0.0))  # F16: V holds K * 2**F16_K_SHIFT
    f_smem = p_smem._reinterpret(gl.float32, [BLOCK_H], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
    if DIRECT:
        f_smem.store(f)
    gl.thread_barrier()
    inv_l = a_smem.load(OROW)
    oh = gl.arange(0, BLOCK_H, layout=OROW)
    og = gl.arange(0, CW, layout=gl.SliceLayout(1, gl.SliceLayout(2, MMA)))
    od = gl.arange(0, DS, layout=gl.SliceLayout(0, gl.SliceLayout(1, MMA)))
    oh3 = gl.expand_dims(gl.expand_dims(oh, 0), 2)
    row = (slot + oh3.to(gl.int64) * s_total) * D
    ptrs = part_out_ptr + row + gl.expand_dims(gl.expand_dims(og, 1), 2) * DS + gl.expand_dims(gl.expand_dims(od, 0), 1)
    out = acc * gl.expand_dims(gl.expand_dims(inv_l, 0), 2)
    if DIRECT:  # every row; an empty one times the factor 0: zeros, or NaN where acc is NaN (as the reference; the
        # combine writes 0 there)
        out = out * gl.expand_dims(gl.expand_dims(f_smem.load(OROW), 0), 2)
        gl.store(ptrs, out.to(gl.bfloat16), mask=pid_h * BLOCK_H + oh3 < H)
    else:  # an empty split writes only its -inf LSE; the combine never reads its out
        gl.store(ptrs, out, mask=(pid_h * BLOCK_H + oh3 < H) & gl.expand_dims(gl.expand_dims(inv_l != 0, 0), 2))
    return (l_i, )  # warp_specialize takes the default partition's results as a tuple


@gluon.jit
def _p_operand(p_smem, hf: gl.constexpr, P2: gl.constexpr):
    """Half hf's P rows [BLOCK_H, TH] of p_smem [2 * BLOCK_H, TH] as every consumer warp's A operand."""
    CW: gl.constexpr = gl.num_warps()
    BLOCK_H: gl.constexpr = p_smem.shape[0] // 2
    pa = p_smem.slice(hf * BLOCK_H, BLOCK_H, dim=0).load(P2)
    return gl.expand_dims(pa, 0).broadcast_to([CW, BLOCK_H, p_smem.shape[1]])


# ----------------------------------------------------------------------------- host side

def launch_portable_h32t_partial(**kw):
    """Run the partial kernel for one KV scope (the keywords of ``portable_ws.launch_portable_partial``: the same
    arguments, grid and checks)."""
    launch_portable_partial(**kw, kernel=portable_ws_h32t_partial_kernel)
