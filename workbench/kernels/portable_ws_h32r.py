"""Rung "portable_ws_h32r": rung 22 (``portable_ws_h32s``) with the K slot handed back one partition barrier later,
so that a tile has two partition barriers in the source instead of three. (Compiled for sm_90, the loop has three
BAR.SYNC a tile against rung 22's four: Triton adds one after the arrive, and one before rung 22's wait.)

Rung 22's consumer ends each tile with a third barrier, only so that every warp is past its reads of the slot (the
V operand), the scores and P before one thread hands the slot back to the producer. Every warp has also passed
those reads by the time the next tile's partial scores are stored and the first barrier of that tile is crossed:
so here the slot of tile i is handed back right after that barrier of tile i + 1, and the third barrier goes. The
scores and P need no third barrier either: a warp stores tile i + 1's scores only after it has crossed tile i's
second barrier, which every warp reaches only after its reads of tile i's scores; and P of tile i + 1 is written
after the first barrier of tile i + 1, which every warp crosses only after its loads of tile i's P and factors. The
producer gets the slot back later by one tile's QK (it waited for a free slot in 47% of its samples in ncu of rung
22, c6216b0: two slots and a consumer-bound block). After the loop one barrier keeps the epilogue's reuse of the
factors' buffer behind every warp's last PV, and the last slot is never handed back (nothing waits for it).

Everything else is rung 22's; what follows is its description.

Rung 22 came from rung 21 (``portable_ws_h32d``, removed; runnable at 66cc8fe): ncu of it at b64
h64 (4288413) found a quarter of the consumer's shared wavefronts to be bank conflicts in the two exchange buffers
(the partial scores' 8-byte stores, P's 4-byte loads), with mio throttle its largest stall; rung 22 is rung 21
with those buffers' swizzles (``S_SMEM``, ``P_SMEM``) chosen by bank; P's swizzle also lets its A operand load by
ldmatrix (lab, sm_90: 4 LDSM.x4 a warp a tile in place of 16 LDS.32).

Rungs 17-20 (``portable_ws``'s 32-head group) split QK over heads and tokens, so every consumer warp re-reads its
share of q from shared memory every tile, and each warp's HMMAs form two dependent chains 32 deep; ncu put the
consumer's time on those ldmatrix reads and chains (docs/decisions.md, rungs 17-20). Here the consumer has
CW = 8 warps and warp w owns column group w (64 of the 512 columns, the producer's scale group w; group 7 holds the
rope) for both MMAs:

- QK: warp w scores all 32 heads against all 32 tokens of the tile over its 64 columns only, a partial S. q's
  64-column slice is the A operand and stays in registers for the whole split (32 a thread), so q is read from
  shared memory once, not once a tile; each warp reads its slice of the K tile once (4 KB), so the block reads K
  once a tile; 32 HMMA a warp in 8 independent chains of 4. The MMAs are batched 3-D ``mma_v2`` over
  [CW, heads, ...] with one warp a batch, so the K slot is stored by column group ([CW, BLOCK_T, 64]).
- The 8 partial scores meet in shared memory (32 KB of fp32, the q slot, free once q is in registers); each warp
  then sums the 8 partials of its own 4 heads and runs their online softmax whole (no row max across warps), and
  writes their P (bf16) and rescale factors for every warp.
- PV: warp w accumulates O[:, 64w:64w+64] (64 fp32 a thread) from all of P (read back, broadcast over the batch)
  and its own 64 columns of the K tile (the V operand): the block reads V once a tile.

Shared memory: 2 K slots of 32 tokens (32 KB each), q / the partial scores (32 KB), P (2 KB), the factors, the
valid bytes and the mbarriers: within sm_120's 101,376 B a block (lab; :func:`estimate_shared_bytes`). One block of
12 warps per SM: 4 producer warps at 96 registers (``portable_ws._producer``, which stores by column group when
the slot is 3-D), the consumer's 8 at (12 x MAXNREG - 4 x 96) / 8.

Per tile a consumer warp reads 4 KB of K, 4 KB of V, 2 KB of P and 4 KB of partial scores, and writes 4 KB of
scores: 18 KB, 144 KB for the block, against rung 20's 4 x 42 = 168 KB, with 2 warps per scheduler instead of 1.
Two partition barriers a tile in the source (scores written, P written); rung 22 had a third (slot read).

Shapes it assumes, pinned by ALLOWED rather than asserted in the kernel: the scores [CW, BLOCK_H, BLOCK_T] fp32 fit
q's slot [CW, BLOCK_H, D // CW] bf16 only while BLOCK_T = D // CW // 2 = 32 (``estimate_shared_bytes`` takes the
larger of the two, the kernel allocates q's), and the producer's by-group store needs one consumer warp per scale
group (the DS == TILE assert).

The epilogue, invalid tokens and padding heads are as in ``portable_ws``; the LSE is written by the warp that owns
the head, the output by the warp that owns the columns. GPU only: Gluon does not run under the interpreter.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mbarrier, mma_v2

from .configs import TiledConfig
from .gluon_common import launch_dependents
from .portable_ws import LAB_ARCHS, _producer, launch_portable_partial  # noqa: F401 - LAB_ARCHS: read by the lab

ALLOWED = dict(BLOCK_H=(32,), BLOCK_T=(32,), num_warps=(8,), num_stages=(1,))
CONFIG_SPACE = [TiledConfig(BLOCK_H=32, BLOCK_T=32, num_warps=8)]
SWITCHES = dict(NUM_BUFS=2, PRODUCER_WARPS=4, PRODUCER_REGS=96)
# The two exchange buffers' swizzles, chosen against the accesses that hit them (bank = 4-byte word mod 32):
# - the partial scores [CW, BLOCK_H, BLOCK_T] fp32, 128-byte rows: the MMA layout stores 8 B a thread, a half-warp 4
#   rows x 32 B at the same columns; 32-byte units XOR'd with row % 4 put those 4 rows in 4 distinct quarters of the
#   banks (rung 21's 16-byte units XOR'd with row % 8 sent rows r and r ^ 1 to the same banks: 2-way, ncu 4288413);
#   the reduction's 16-byte loads read a whole row a quarter-warp, so any permutation within a row is free for them.
S_SMEM = gl.constexpr(gl.SwizzledSharedLayout(8, 1, 4, order=[2, 1, 0]))
# - P [BLOCK_H, BLOCK_T] bf16, 64-byte rows, so rows r and r + 1 share one 128-byte line: the A operand reads 8 rows
#   at the same columns a phase; 16-byte units XOR'd with (row // 2) % 4 give the 8 rows 8 distinct 16-byte bank
#   groups, so both ldmatrix (which Triton emits for this layout) and 4-byte loads run conflict-free (rung 21's
#   4-byte units XOR'd with row % 8 compiled to 4-byte loads and left rows r and r + 2 on the same banks: 2-way).
P_SMEM = gl.constexpr(gl.SwizzledSharedLayout(8, 2, 4, order=[1, 0]))
MAXNREG = 168  # one block of 12 warps per SM: 65536 / 384 threads, rounded down to a multiple of 8


def estimate_shared_bytes(c: TiledConfig, NUM_BUFS: int = 2, PRODUCER_WARPS: int = 4, PRODUCER_REGS: int = 96) -> int:
    """Shared bytes of one block: NUM_BUFS bf16 K slots (1 KB a token) with their valid bytes and two mbarriers
    each, q (1 KB a head; the partial scores reuse it: CW x heads x tokens fp32 is the same 32 KB at 32 heads, 32
    tokens and 8 warps), P in bf16 (2 B a head-token), the factors (4 B a head) and 256 B for the region's own
    words, rounded up to 128 B."""
    t, h = c.BLOCK_T, c.BLOCK_H
    total = NUM_BUFS * (1024 * t + t + 16) + max(1024 * h, 4 * c.num_warps * h * t) + 2 * h * t + 4 * h + 256
    return -(-total // 128) * 128


@gluon.jit
def portable_ws_h32r_partial_kernel(
    q_ptr,            # [b, s_q, h, 512] bf16, last stride 1
    stride_qb, stride_qs, stride_qh,
    cache_u8,         # the flat bytes of one cache
    stride_page, block_size, num_tokens,
    idx_ptr,          # [b, s_q, topk] int32
    stride_ib, stride_is,
    topk_len_ptr, stride_tl,  # [b] int32, any stride (read only when HAS_TOPK_LEN)
    part_out_ptr,     # [b*s_q, h, s_total, 512] fp32
    part_lse_ptr,     # [b*s_q, h, s_total] fp32, base 2
    sm_scale_log2,
    H, S_Q, TOPK, split_offset, tokens_per_split, s_total,
    HAS_TOPK_LEN: gl.constexpr,
    D_NOPE: gl.constexpr, D_ROPE: gl.constexpr, TILE: gl.constexpr, DATA_BYTES: gl.constexpr,
    SCALE_BYTES: gl.constexpr,
    BLOCK_H: gl.constexpr, BLOCK_T: gl.constexpr, BS_SHIFT: gl.constexpr,
    NUM_BUFS: gl.constexpr,            # K slots in the ring
    PRODUCER_WARPS: gl.constexpr,      # warps of the producer partition: 8 tokens each
    PRODUCER_REGS: gl.constexpr,       # its registers per thread (setmaxnreg); the consumer gets the rest
):
    D: gl.constexpr = D_NOPE + D_ROPE
    CW: gl.constexpr = gl.num_warps()   # consumer warps, one column group each
    DS: gl.constexpr = D // CW          # a warp's columns: the producer's scale group
    gl.static_assert(DS == TILE, "one consumer warp per scale group")
    # [CW, rows, DS] bf16: one 128-byte row a (group, row), 128-byte swizzle: conflict-free ldmatrix both ways
    G_SMEM: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=3)
    V_SMEM: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])
    pid_h = gl.program_id(0)
    split = gl.program_id(1)
    pid_q = gl.program_id(2)
    bi = pid_q // S_Q
    si = pid_q % S_Q

    k_smem = gl.allocate_shared_memory(gl.bfloat16, [NUM_BUFS, CW, BLOCK_T, DS], G_SMEM)
    q_smem = gl.allocate_shared_memory(gl.bfloat16, [CW, BLOCK_H, DS], G_SMEM)  # then the partial scores
    p_smem = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_H, BLOCK_T], P_SMEM)
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

    gl.warp_specialize([
        (_consumer, (q_smem, k_smem, valid_smem, p_smem, a_smem, full, empty, start, end, q_row, stride_qh, pid_h,
                     H, sm_scale_log2, part_out_ptr, part_lse_ptr, slot, s_total, BLOCK_H, BLOCK_T, D, NUM_BUFS)),
        (_producer, (k_smem, valid_smem, full, empty, cache_u8, stride_page, block_size, num_tokens, idx_row,
                     start, end, D_NOPE, D_ROPE, TILE, DATA_BYTES, SCALE_BYTES, BLOCK_T, BS_SHIFT, NUM_BUFS)),
    ], [PRODUCER_WARPS], [PRODUCER_REGS])


@gluon.jit
def _consumer(q_smem, k_smem, valid_smem, p_smem, a_smem, full, empty, start, end, q_row, stride_qh, pid_h, H,
              sm_scale_log2, part_out_ptr, part_lse_ptr, slot, s_total, BLOCK_H: gl.constexpr,
              BLOCK_T: gl.constexpr, D: gl.constexpr, NUM_BUFS: gl.constexpr):
    """q into registers, then per full slot: partial QK, the scores' reduction and softmax by head, PV by columns;
    then the epilogue (each warp its heads' LSE and its columns' output)."""
    CW: gl.constexpr = gl.num_warps()
    DS: gl.constexpr = D // CW
    # one warp a batch (a column group) for both MMAs: S partial [CW, BLOCK_H, BLOCK_T], O [CW, BLOCK_H, DS]
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[CW, 1, 1], instr_shape=[1, 16, 8])
    A_OP: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    B_OP: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    # the reduction: warp w its BLOCK_H // CW heads, all CW partials of their BLOCK_T tokens (4 a thread: 16 B)
    RED: gl.constexpr = gl.BlockedLayout([CW, 1, 4], [1, 4, 8], [1, CW, 1], [2, 1, 0])
    SM: gl.constexpr = gl.SliceLayout(0, RED)          # [BLOCK_H, BLOCK_T]: the softmax's layout
    HEAD: gl.constexpr = gl.SliceLayout(1, SM)         # [BLOCK_H]
    TOK: gl.constexpr = gl.SliceLayout(0, SM)          # [BLOCK_T]
    P2: gl.constexpr = gl.SliceLayout(0, A_OP)         # [BLOCK_H, BLOCK_T]: P as every batch's A operand
    OROW: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(2, MMA))  # [BLOCK_H] in O's layout
    QL: gl.constexpr = gl.BlockedLayout([1, 1, 8], [1, 4, 8], [CW, 1, 1], [2, 1, 0])  # [CW, BLOCK_H, DS], 16 B

    # q [CW, BLOCK_H, DS]: group w of every head, zero past the last head; through shared memory once (ldmatrix)
    qg = gl.arange(0, CW, layout=gl.SliceLayout(1, gl.SliceLayout(2, QL)))
    qh = pid_h * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(0, gl.SliceLayout(2, QL)))
    qd = gl.arange(0, DS, layout=gl.SliceLayout(0, gl.SliceLayout(1, QL)))
    qg3 = gl.expand_dims(gl.expand_dims(qg, 1), 2)
    qh3 = gl.expand_dims(gl.expand_dims(qh, 0), 2)
    qd3 = gl.expand_dims(gl.expand_dims(qd, 0), 1)
    q_smem.store(gl.load(q_row + qh3 * stride_qh + qg3 * DS + qd3, mask=qh3 < H, other=0.0))
    gl.thread_barrier()
    q_a = q_smem.load(A_OP)                            # [CW, BLOCK_H, DS] bf16, 32 registers a thread
    gl.thread_barrier()  # every warp has its q before the slot is reused for the scores
    s_smem = q_smem._reinterpret(gl.float32, [CW, BLOCK_H, BLOCK_T], S_SMEM)

    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=HEAD)
    l_t = gl.zeros([BLOCK_H, BLOCK_T], gl.float32, layout=SM)  # the row sums' terms, by thread
    acc = gl.zeros([CW, BLOCK_H, DS], gl.float32, layout=MMA)   # O, warp w its columns
    s_zero = gl.zeros([CW, BLOCK_H, BLOCK_T], gl.float32, layout=MMA)
    i = 0
    for t0 in range(start, end, BLOCK_T):
        buf = i % NUM_BUFS
        mbarrier.wait(full.index(buf), (i // NUM_BUFS) & 1)
        kb = k_smem.index(buf)  # [CW, BLOCK_T, DS] bf16
        s_smem.store(mma_v2(q_a, kb.permute((0, 2, 1)).load(B_OP), s_zero))
        gl.thread_barrier()
        if i > 0:  # every warp has stored this tile's scores, so it is past its reads of the last tile's slot
            mbarrier.arrive(empty.index((i - 1) % NUM_BUFS))
        ok = valid_smem.index(buf).load(TOK) != 0
        s = gl.where(gl.expand_dims(ok, 0), gl.sum(s_smem.load(RED), 0) * sm_scale_log2, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(s, 1))
        alpha = gl.exp2(m_i - gl.where(m_new == float("-inf"), 0.0, m_new))  # no (-inf) - (-inf)
        m_i = m_new
        p = gl.exp2(s - gl.expand_dims(gl.where(m_i == float("-inf"), 0.0, m_i), 1))  # [BLOCK_H, BLOCK_T] fp32
        l_t = l_t * gl.expand_dims(alpha, 1) + p
        p_smem.store(p.to(gl.bfloat16))
        a_smem.store(alpha)
        gl.thread_barrier()
        pa = gl.expand_dims(p_smem.load(P2), 0).broadcast_to([CW, BLOCK_H, BLOCK_T])
        acc = acc * gl.expand_dims(gl.expand_dims(a_smem.load(OROW), 0), 2)
        acc = mma_v2(pa, kb.load(B_OP), acc)
        i += 1
    gl.thread_barrier()  # every warp's last reads of P and the factors before the epilogue reuses a_smem
    launch_dependents()

    # epilogue: the LSE by the head's warp; 1 / l to every warp through a_smem, the output by the columns' warp
    l_i = gl.sum(l_t, 1)
    live = l_i != 0
    heads = gl.arange(0, BLOCK_H, layout=HEAD)
    gl.store(part_lse_ptr + slot + heads * s_total, gl.where(live, m_i + gl.log2(l_i), float("-inf")),
             mask=pid_h * BLOCK_H + heads < H)
    a_smem.store(gl.where(live, 1.0 / l_i, 0.0))
    gl.thread_barrier()
    inv_l = a_smem.load(OROW)
    oh = gl.arange(0, BLOCK_H, layout=OROW)
    og = gl.arange(0, CW, layout=gl.SliceLayout(1, gl.SliceLayout(2, MMA)))
    od = gl.arange(0, DS, layout=gl.SliceLayout(0, gl.SliceLayout(1, MMA)))
    oh3 = gl.expand_dims(gl.expand_dims(oh, 0), 2)
    row = (slot + oh3.to(gl.int64) * s_total) * D
    gl.store(part_out_ptr + row + gl.expand_dims(gl.expand_dims(og, 1), 2) * DS + gl.expand_dims(gl.expand_dims(od, 0), 1),
             acc * gl.expand_dims(gl.expand_dims(inv_l, 0), 2),
             mask=(pid_h * BLOCK_H + oh3 < H) & gl.expand_dims(gl.expand_dims(inv_l != 0, 0), 2))


# ----------------------------------------------------------------------------- host side

def launch_portable_h32r_partial(**kw):
    """Run the partial kernel for one KV scope (the keywords of ``portable_ws.launch_portable_partial``: the same
    arguments, grid and checks)."""
    launch_portable_partial(**kw, kernel=portable_ws_h32r_partial_kernel)
