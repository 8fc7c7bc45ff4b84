"""Rung "portable_ws": wgmma_ws's schedule built only from instructions that sm_120 (consumer Blackwell) has.

The Hopper default (``wgmma_ws``) takes its speed from a change of schedule, not from wgmma alone: a producer
partition gathers and dequantises while the consumer warps run the MMAs, and the two meet only at mbarriers
around a ring of K tiles in shared memory. This kernel keeps that schedule and swaps every Hopper-only piece:

- the MMAs are ``mma.sync`` (Gluon ``mma_v2``, SASS HMMA) with fp32 accumulators; their operands come from shared
  memory through ``ldmatrix`` (the dot-operand loads), not through wgmma descriptors, so there is no async-proxy
  fence and no wgmma wait;
- K, q and P are bf16 and the dequant is the exact bit-built one (``gluon_common.dequant_words``:
  ``bf16(fp8) * bf16(scale)`` for every scale byte 0..254), so there is no f16 window and no second pass: the
  output is finite wherever FlashMLA's is, for any q and rope in bf16 range;
- the ring fits sm_120's 101,376 B a block: NUM_BUFS = 2 slots of BLOCK_T = 32 tokens (32 KB each), q (16 KB),
  the scores' exchange (2 KB) and the mbarriers: 84,180 B (lab; :func:`estimate_shared_bytes`). One block per SM
  on sm_120; two on sm_90, where the 128-register cap (MAXNREG) lets them.

The partitions:

- producer (a worker partition of PRODUCER_WARPS = 4 warps at PRODUCER_REGS = 96 registers, one warp per 8 tokens,
  4 lanes a token with 16-byte loads): the next tile's loads are in flight while it waits for a free slot; then
  it dequantises this tile (after the wait, so that the dequantised words and the next tile's bytes are not live
  together), writes it (the rope in the last group's words) and its valid bytes, syncs its own warps and signals
  the slot full;
- consumer (the default partition, num_warps = 4 warps at the remaining 160 registers, one 16-head group): q
  [BLOCK_H, 512] into shared memory once; per tile S [BLOCK_H, BLOCK_T] = q K^T, each warp 8 tokens, in 8 k-chunks
  of 64 columns summed into 4 independent accumulators (one accumulator made the warp's 32 HMMAs one dependent
  chain); q's fragments come from shared memory every tile (16 KB a warp), so no thread holds all of q's 128
  registers. The warps' scores go through shared memory once (one partition barrier) and come back in the
  A-operand layout, where every warp holds every token of every head: the row max is in-warp (quad shuffles), the
  online softmax runs in base 2, alpha rescales the accumulator with no data movement (the A operand's rows and
  the accumulator's sit in the same lanes), and P (bf16) is the PV's A operand straight from registers. O
  [BLOCK_H, 512] += P K in two halves of 16 tokens (each warp a quarter of the output columns: 64 fp32 registers
  a thread); then a partition barrier (every consumer warp has read the slot and the scores) and the slot goes
  back to the producer. Per tile: 64 HMMA a warp, 3 partition barriers (one of them Triton's, before the
  mbarrier wait), no CTA-wide barrier.

The 32-head group (rung "portable_ws_h32q", the same kernel at BLOCK_H = 32: ``_consume_p``): the consumer's
accumulator is [32, 512] fp32, 128 registers a thread, so the consumer runs at 2 x MAXNREG_H32 - 96 = 240
registers and one block fits an SM. Exchanging the fp32 scores would take 4 KB more than sm_120 has; instead the
softmax runs in QK's MMA layout (2 x 2 warps: each 16 heads by 16 tokens; the row max across a head's 2 warps is
the compiler's reduction through shared memory), and the warps exchange P in bf16 (2 KB a tile), which comes back
as the PV's A operand for every token: 100,708 B (lab). Rung 17 (portable_ws_h32, removed at rung 20) split QK
1 x 4, so that each warp read all of q every tile (docs/decisions.md, rungs 17, 19 and 20). The row sums add the
fp32 P, each thread its own terms, reduced across the warps once after the loop. (Before d6327f3 they were taken
from the bf16 P read back, and the log-sum-exp carried bf16's rounding: 3 failed LSE checks at 8aa1f61,
docs/decisions.md, rung 17.)

Rung 24 (``portable_ws_h32t``, a module of its own, as were rungs 21-23 before it) reuses this producer, its
launcher and its checks, with the slot stored by token half and column group.

Invalid tokens (-1, out of range, past topk_length or the split) load as zero and are masked to -inf before the
softmax. Padding heads (past H in the last head group) load q as zero and are never stored. The epilogue writes
the split's normalised output and base-2 LSE into the partial buffers exactly as the other split kernels do, so
``kernels/combine.py`` merges them unchanged (a call of one split in all writes out and lse itself, as the combine
would: ``KernelSpec.direct``, ``gluon_common.store_lse``); after its main loop the consumer signals
griddepcontrol.launch_dependents (sm_90 and up), so a combine launched as a programmatic dependent starts early.

Targets: warp specialisation needs setmaxnreg (sm_90 and up): sm_90, sm_100 and sm_120 (``LAB_ARCHS``, which the
resource lab reads). For sm_89 LLVM aborts on it; the lab compiles that target in a child process and reports the
failure. GPU only: Gluon does not run under the interpreter.
"""
from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mbarrier, mma_v2

from .common import cdiv, launch, split_args
from .configs import TiledConfig
from .gluon_common import (cache_constexprs, dequant_tile, epilogue_args, launch_dependents, load_idx, load_q,
                           load_tile, split_lse2, store_lse)

# the targets the kernel is written for (mma.sync, ldmatrix, mbarrier try_wait, setmaxnreg): the lab compiles it for
# these in its own process (resources.gluon_archs)
LAB_ARCHS = ("sm_90", "sm_100", "sm_120")

ALLOWED = dict(BLOCK_H=(16,), BLOCK_T=(32,), num_warps=(4,), num_stages=(1,))
CONFIG_SPACE = [TiledConfig(BLOCK_H=16, BLOCK_T=32, num_warps=4)]
SWITCHES = dict(NUM_BUFS=2, PRODUCER_WARPS=4, PRODUCER_REGS=96)
MAXNREG = 128  # two 8-warp blocks per SM where shared memory lets them (sm_90: 2 x ~83 KB): 65536 / 512 threads
# the 32-head group (rung portable_ws_h32q): the consumer's accumulator is 128 fp32 a thread, so one block per SM and
# the consumer at 2 x 168 - 96 = 240 registers (lab, sm_120 and sm_90: 8-16 B of stack, spilled outside the loop;
# at 128 it spills ~600 B)
ALLOWED_H32 = dict(BLOCK_H=(32,), BLOCK_T=(32,), num_warps=(4,), num_stages=(1,))
CONFIG_SPACE_H32 = [TiledConfig(BLOCK_H=32, BLOCK_T=32, num_warps=4)]
MAXNREG_H32 = 168
KC = gl.constexpr(64)      # QK's k-chunk: columns of q and K per mma_v2 call
QK_ACCS = gl.constexpr(4)  # QK's independent partial sums (the 4 named in _qk_tile)


def estimate_shared_bytes(c: TiledConfig, NUM_BUFS: int = 2, PRODUCER_WARPS: int = 4, PRODUCER_REGS: int = 96) -> int:
    """Shared bytes of one block, as the compiler allocates them (lab: 84,180 B at 16 heads and 100,708 at 32, with
    32-token tiles, sm_120, sm_100 and sm_90 alike): NUM_BUFS bf16 K slots (1 KB a token) with their valid bytes
    and two mbarriers each, q (1 KB a head), what the consumer's warps exchange (16 heads: the fp32 scores, 4 B a
    token a head; more: P in bf16, 2 B, and the row max's reduction across a head's 2 warps, 8 B a head), and 256 B
    for the warp-specialised region's own words and small scratch, rounded up to 128 B. PRODUCER_WARPS and
    PRODUCER_REGS move no shared bytes; they are named so that a misspelled switch is a TypeError."""
    t, h = c.BLOCK_T, c.BLOCK_H
    exchange = 4 * t * h if h == 16 else 2 * t * h + 8 * h
    total = NUM_BUFS * (1024 * t + t + 16) + 1024 * h + exchange + 256
    return -(-total // 128) * 128


@gluon.jit
def portable_ws_partial_kernel(
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
):
    D: gl.constexpr = D_NOPE + D_ROPE
    K_SMEM: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16)
    Q_SMEM: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16)
    V_SMEM: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])  # per slot; the ring index leads

    pid_h = gl.program_id(0)
    split = gl.program_id(1)
    pid_q = gl.program_id(2)
    bi = pid_q // S_Q
    si = pid_q % S_Q

    q_smem = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_H, D], Q_SMEM)  # written by the consumer
    k_smem = gl.allocate_shared_memory(gl.bfloat16, [NUM_BUFS, BLOCK_T, D], K_SMEM)
    valid_smem = gl.allocate_shared_memory(gl.int8, [NUM_BUFS, BLOCK_T], V_SMEM)
    # what the consumer's warps exchange (XOR-swizzled units: conflict-free both ways): at 16 heads the fp32 scores;
    # at 32 heads P in bf16 (the fp32 scores, 4 KB, would put the block over sm_120's 101,376 B)
    XL: gl.constexpr = gl.SwizzledSharedLayout(2, 1, 8, order=[1, 0])
    if BLOCK_H == 16:
        x_smem = gl.allocate_shared_memory(gl.float32, [BLOCK_H, BLOCK_T], XL)
    else:
        x_smem = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_H, BLOCK_T], XL)
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

    m_i, l_i, acc = gl.warp_specialize([
        (_consumer, (q_smem, k_smem, valid_smem, x_smem, full, empty, start, end, q_row, stride_qh, pid_h, H,
                     sm_scale_log2, BLOCK_H, BLOCK_T, D, NUM_BUFS)),
        (_producer, (k_smem, valid_smem, full, empty, cache_u8, stride_page, block_size, num_tokens, idx_row,
                     start, end, D_NOPE, D_ROPE, TILE, DATA_BYTES, SCALE_BYTES, BLOCK_T, BS_SHIFT, NUM_BUFS)),
    ], [PRODUCER_WARPS], [PRODUCER_REGS])
    _store_partial(m_i, l_i, acc, part_out_ptr, part_lse_ptr, sink_ptr, stride_sink, pid_q, pid_h, split,
                   split_offset, s_total, H, S_Q, BLOCK_H, D, HAS_SINK, DIRECT)


@gluon.jit
def _consumer(q_smem, k_smem, valid_smem, x_smem, full, empty, start, end, q_row, stride_qh, pid_h, H,
              sm_scale_log2, BLOCK_H: gl.constexpr, BLOCK_T: gl.constexpr, D: gl.constexpr,
              NUM_BUFS: gl.constexpr):
    """The consumer partition by head group (the tuples of warp_specialize's arguments cannot carry constexprs, so
    the choice is made here): q into q_smem, then QK, softmax and PV over the full slots, in order; returns (m_i,
    l_i [BLOCK_H] base 2, O [BLOCK_H, D] fp32 unnormalised), all in the MMA layout's family."""
    QL: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [gl.num_warps(), 1], [1, 0])  # [BLOCK_H, D] bf16, 16 B
    q_smem.store(load_q(q_row, stride_qh, pid_h, H, BLOCK_H, D, QL))
    gl.thread_barrier()  # every consumer warp's part of q before any reads it
    if BLOCK_H == 16:
        m_i, l_i, acc = _consume_scores(q_smem, k_smem, valid_smem, x_smem, full, empty, start, end, sm_scale_log2,
                                        BLOCK_H, BLOCK_T, D, NUM_BUFS)
    else:
        m_i, l_i, acc = _consume_p(q_smem, k_smem, valid_smem, x_smem, full, empty, start, end, sm_scale_log2,
                                   BLOCK_H, BLOCK_T, D, NUM_BUFS)
    # the combine, when launched as a programmatic dependent (decode.combine_pdl), may start once every block is
    # here; it waits for the whole grid before it reads the partials
    launch_dependents()
    return m_i, l_i, acc


@gluon.jit
def _consume_scores(q_smem, k_smem, valid_smem, s_smem, full, empty, start, end, sm_scale_log2,
                    BLOCK_H: gl.constexpr, BLOCK_T: gl.constexpr, D: gl.constexpr, NUM_BUFS: gl.constexpr):
    """16 heads: the warps exchange the fp32 scores, and the softmax runs in the A-operand layout."""
    CW: gl.constexpr = gl.num_warps()
    # one 16-row MMA tile of heads; the warps split the N side: S's tokens, O's output columns
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, CW], instr_shape=[16, 8])
    A_OP: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    B_OP: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    ROW: gl.constexpr = gl.SliceLayout(1, A_OP)  # [BLOCK_H] of the softmax: every warp holds every head
    COL: gl.constexpr = gl.SliceLayout(0, A_OP)  # [BLOCK_T]

    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=ROW)
    l_i = gl.zeros([BLOCK_H], gl.float32, layout=ROW)
    acc = gl.zeros([BLOCK_H, D], gl.float32, layout=MMA)
    i = 0
    for t0 in range(start, end, BLOCK_T):
        buf = i % NUM_BUFS
        mbarrier.wait(full.index(buf), (i // NUM_BUFS) & 1)
        kb = k_smem.index(buf)  # [BLOCK_T, D] bf16
        # every warp needs every token's score (the row max, and P as the PV's A operand): one exchange through
        # shared memory, behind one partition barrier
        s_smem.store(_qk_tile(q_smem, kb, BLOCK_H, BLOCK_T, D, MMA, A_OP, B_OP))
        gl.thread_barrier()
        # read back in two halves of BLOCK_T // 2 tokens, each the A operand of one PV step, so that only half of
        # K's B operand (32 registers a thread) need be live at once
        sa = s_smem.slice(0, BLOCK_T // 2, dim=1).load(A_OP)           # [BLOCK_H, BLOCK_T // 2] fp32
        sb = s_smem.slice(BLOCK_T // 2, BLOCK_T // 2, dim=1).load(A_OP)
        vs = valid_smem.index(buf)
        sa = gl.where(gl.expand_dims(vs.slice(0, BLOCK_T // 2).load(COL) != 0, 0), sa * sm_scale_log2,
                      float("-inf"))
        sb = gl.where(gl.expand_dims(vs.slice(BLOCK_T // 2, BLOCK_T // 2).load(COL) != 0, 0), sb * sm_scale_log2,
                      float("-inf"))
        # within each warp: a head's tokens sit in one quad of lanes
        m_new = gl.maximum(m_i, gl.maximum(gl.max(sa, 1), gl.max(sb, 1)))
        m_use = gl.expand_dims(gl.where(m_new == float("-inf"), 0.0, m_new), 1)  # no (-inf) - (-inf)
        alpha = gl.exp2(m_i - gl.where(m_new == float("-inf"), 0.0, m_new))
        pa = gl.exp2(sa - m_use)
        pb = gl.exp2(sb - m_use)
        l_i = l_i * alpha + (gl.sum(pa, 1) + gl.sum(pb, 1))
        m_i = m_new
        # the A operand's rows and the accumulator's are held by the same lanes: no data moves
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, MMA), assert_trivial=True), 1)
        # O += P K, K's rows [BLOCK_T, D] as the B operand, half the tokens at a time
        acc = mma_v2(pa.to(gl.bfloat16), kb.slice(0, BLOCK_T // 2, dim=0).load(B_OP), acc)
        acc = mma_v2(pb.to(gl.bfloat16), kb.slice(BLOCK_T // 2, BLOCK_T // 2, dim=0).load(B_OP), acc)
        gl.thread_barrier()  # every consumer warp has read the slot and the scores before they are reused
        mbarrier.arrive(empty.index(buf))
        i += 1
    return m_i, l_i, acc


@gluon.jit
def _consume_p(q_smem, k_smem, valid_smem, p_smem, full, empty, start, end, sm_scale_log2,
               BLOCK_H: gl.constexpr, BLOCK_T: gl.constexpr, D: gl.constexpr, NUM_BUFS: gl.constexpr):
    """More than 16 heads: the softmax runs in the MMA layout (each warp its own tokens, the row max across the
    warps by the compiler's reduction) and the warps exchange P in bf16 instead of the fp32 scores, so the exchange
    takes half the shared memory. The row sums are of the fp32 P, each thread its own elements until the end (no
    second reduction across the warps a tile). The rescale runs every tile: a lazy one (rung 18, portable_ws_lazy,
    d6327f3: only when a head's max grows by more than 2**8) ran slower at 60 of the 64 crossover and heads shapes
    (up to 4.5%), since the consumer waits on its HMMAs and ldmatrix loads, not on the rescale's FMULs
    (docs/decisions.md, rung 18).

    QK runs in a 2 x 2 warp layout (16 heads by 16 tokens a warp) and PV in 1 x 4 (128 output columns a warp), so
    alpha changes layout between them. Each warp re-reads q for its heads and K for its tokens every tile: 2 x 2
    reads 16 KB of q and 16 KB of K a warp, where rung 17's 1 x 4 read 32 and 8, and the consumer waits on those
    reads (rung 20; 8 consumer warps, rung 19, only moved the wait to issuing them)."""
    CW: gl.constexpr = gl.num_warps()
    # S: 2 warps along the heads (16 each, the MMA's M), the rest along the tokens; O: the warps split the columns
    QK: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[2, CW // 2], instr_shape=[16, 8])
    PV: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, CW], instr_shape=[16, 8])
    QK_A: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=QK, k_width=2)
    QK_B: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=QK, k_width=2)
    A_OP: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=PV, k_width=2)
    B_OP: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=PV, k_width=2)
    COL: gl.constexpr = gl.SliceLayout(0, QK)  # [BLOCK_T]

    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=gl.SliceLayout(1, QK))
    l_t = gl.zeros([BLOCK_H, BLOCK_T], gl.float32, layout=QK)  # the row sums' terms, by thread
    acc = gl.zeros([BLOCK_H, D], gl.float32, layout=PV)          # each warp D / CW columns
    i = 0
    for t0 in range(start, end, BLOCK_T):
        buf = i % NUM_BUFS
        mbarrier.wait(full.index(buf), (i // NUM_BUFS) & 1)
        kb = k_smem.index(buf)  # [BLOCK_T, D] bf16
        ok = valid_smem.index(buf).load(COL) != 0
        s = gl.where(gl.expand_dims(ok, 0), _qk_tile(q_smem, kb, BLOCK_H, BLOCK_T, D, QK, QK_A, QK_B) * sm_scale_log2,
                     float("-inf"))
        m_new = gl.maximum(m_i, gl.max(s, 1))
        alpha = gl.exp2(m_i - gl.where(m_new == float("-inf"), 0.0, m_new))  # no (-inf) - (-inf)
        m_i = m_new
        l_t = l_t * gl.expand_dims(alpha, 1)
        p = gl.exp2(s - gl.expand_dims(gl.where(m_i == float("-inf"), 0.0, m_i), 1))  # [BLOCK_H, BLOCK_T] fp32
        l_t = l_t + p
        p_smem.store(p.to(gl.bfloat16))
        gl.thread_barrier()
        # P back in the A-operand layout (every warp every token), in halves of BLOCK_T // 2 tokens, each the A
        # operand of one PV step, so that only half of K's B operand (32 registers a thread) need be live at once
        pa = p_smem.slice(0, BLOCK_T // 2, dim=1).load(A_OP)            # [BLOCK_H, BLOCK_T // 2] bf16
        pb = p_smem.slice(BLOCK_T // 2, BLOCK_T // 2, dim=1).load(A_OP)
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, PV)), 1)
        acc = mma_v2(pa, kb.slice(0, BLOCK_T // 2, dim=0).load(B_OP), acc)
        acc = mma_v2(pb, kb.slice(BLOCK_T // 2, BLOCK_T // 2, dim=0).load(B_OP), acc)
        gl.thread_barrier()  # every consumer warp has read the slot and P before they are reused
        mbarrier.arrive(empty.index(buf))
        i += 1
    return m_i, gl.sum(l_t, 1), acc


@gluon.jit
def _qk_tile(q_smem, kb, BLOCK_H: gl.constexpr, BLOCK_T: gl.constexpr, D: gl.constexpr, MMA: gl.constexpr,
             A_OP: gl.constexpr, B_OP: gl.constexpr):
    """S [BLOCK_H, BLOCK_T] fp32 = q K^T in layout MMA (16 heads: the warps split the tokens; 32 heads: 2 x 2, heads
    by tokens), in QK_ACCS independent partial sums over the D columns, so that the HMMAs of one warp do not form a
    single dependent chain."""
    s_zero = gl.zeros([BLOCK_H, BLOCK_T], gl.float32, layout=MMA)
    s0 = s_zero
    s1 = s_zero
    s2 = s_zero
    s3 = s_zero
    for kc in gl.static_range(0, D // KC, QK_ACCS):
        s0 = _qk_chunk(q_smem, kb, s0, kc * KC, A_OP, B_OP)
        s1 = _qk_chunk(q_smem, kb, s1, (kc + 1) * KC, A_OP, B_OP)
        s2 = _qk_chunk(q_smem, kb, s2, (kc + 2) * KC, A_OP, B_OP)
        s3 = _qk_chunk(q_smem, kb, s3, (kc + 3) * KC, A_OP, B_OP)
    return (s0 + s1) + (s2 + s3)


@gluon.jit
def _qk_chunk(q_smem, kb, s, k0, A_OP: gl.constexpr, B_OP: gl.constexpr):
    """s + q[:, k0:k0+KC] K[:, k0:k0+KC]^T: both operands from shared memory (ldmatrix)."""
    a = q_smem.slice(k0, KC, dim=1).load(A_OP)                 # [BLOCK_H, KC]
    b = kb.slice(k0, KC, dim=1).permute((1, 0)).load(B_OP)     # [KC, BLOCK_T]
    return mma_v2(a, b, s)


@gluon.jit
def _producer(k_smem, valid_smem, full, empty, cache_u8, stride_page, block_size, num_tokens, idx_row, start, end,
              D_NOPE: gl.constexpr, D_ROPE: gl.constexpr, TILE: gl.constexpr, DATA_BYTES: gl.constexpr,
              SCALE_BYTES: gl.constexpr, BLOCK_T: gl.constexpr, BS_SHIFT: gl.constexpr, NUM_BUFS: gl.constexpr,
              F16: gl.constexpr = 0):
    """Gather and dequantise (bf16, exact; with F16 f16 in wgmma_f16's window: gluon_common.dequant_tile) each tile
    of the split into the next free slot, then mark it full. A slot
    is [BLOCK_T, D] (this module's rungs) or [2 G, BLOCK_T // 2, D // G], one plane a token half and scale group
    (portable_ws_h32t, whose consumer warps each read one group's columns, or two groups of one half): the same
    words, permuted before the store."""
    PW: gl.constexpr = gl.num_warps()
    D: gl.constexpr = D_NOPE + D_ROPE
    G: gl.constexpr = SCALE_BYTES
    W: gl.constexpr = TILE // 4
    # [BLOCK_T, G, W] raw words: 4 lanes share a token, each 16 B of every group; a warp takes 8 tokens
    L3: gl.constexpr = gl.BlockedLayout([1, 8, 4], [8, 1, 4], [PW, 1, 1], [2, 1, 0])
    ROWS: gl.constexpr = gl.SliceLayout(1, gl.SliceLayout(2, L3))        # [BLOCK_T]
    GRP2: gl.constexpr = gl.SliceLayout(2, L3)                           # [BLOCK_T, G]
    KW: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=32)
    KW3: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=32, rank=3)
    g = gl.arange(0, G, layout=gl.SliceLayout(0, GRP2))
    g3 = gl.expand_dims(gl.expand_dims(g, 0), 2)  # [1, G, 1]
    w3 = gl.expand_dims(gl.expand_dims(gl.arange(0, W, layout=gl.SliceLayout(0, gl.SliceLayout(1, L3))), 0), 1)
    cache_w = cache_u8.to(gl.pointer_type(gl.int32), bitcast=True)
    cache_d = cache_u8.to(gl.pointer_type(gl.int64), bitcast=True)
    is_rope = g3 == G - 1

    idx = load_idx(idx_row, start, end, BLOCK_T, ROWS)
    words, rope, sbyte, valid = load_tile(cache_w, cache_d, cache_u8, idx, start, end, num_tokens, stride_page,
                                          block_size, g, g3, w3, D_NOPE, DATA_BYTES, SCALE_BYTES, W, BLOCK_T, ROWS,
                                          BS_SHIFT)
    idx = load_idx(idx_row, start + BLOCK_T, end, BLOCK_T, ROWS)
    i = 0
    for t0 in range(start, end, BLOCK_T):
        buf = i % NUM_BUFS
        # the next tile's gathers are in flight while this one is dequantised and waits for its slot
        n_words, n_rope, n_sbyte, n_valid = load_tile(cache_w, cache_d, cache_u8, idx, t0 + BLOCK_T, end, num_tokens,
                                                      stride_page, block_size, g, g3, w3, D_NOPE, DATA_BYTES,
                                                      SCALE_BYTES, W, BLOCK_T, ROWS, BS_SHIFT)
        idx = load_idx(idx_row, t0 + 2 * BLOCK_T, end, BLOCK_T, ROWS)
        # a fresh barrier counts as completed in phase 1, so each slot's first wait passes. The dequant follows the
        # wait, so that its 64 words a thread need not be live beside the next tile's 32 across it (spills at 96)
        mbarrier.wait(empty.index(buf), ((i // NUM_BUFS) & 1) ^ 1)
        lo, hi = dequant_tile(words, rope, sbyte, is_rope, F16)  # the rope's pairs in the last group
        kw = gl.join(lo, hi)                                     # [BLOCK_T, G, W, 2] int32: 16-bit pairs
        if len(k_smem.shape) == 3:   # slots [BLOCK_T, D]
            k_smem.index(buf)._reinterpret(gl.int32, [BLOCK_T, D // 2], KW).store(gl.reshape(kw, [BLOCK_T, D // 2]))
        else:                        # slots [2 G, BLOCK_T // 2, D // G], by token half and group (portable_ws_h32t)
            k_smem.index(buf)._reinterpret(gl.int32, [2 * G, BLOCK_T // 2, 2 * W], KW3).store(gl.reshape(
                gl.permute(gl.reshape(kw, [2, BLOCK_T // 2, G, 2 * W]), (0, 2, 1, 3)), [2 * G, BLOCK_T // 2, 2 * W]))
        valid_smem.index(buf).store(valid.to(gl.int8))
        gl.thread_barrier()   # every producer warp's part of the tile before the one arrive
        mbarrier.arrive(full.index(buf))
        words, rope, sbyte, valid = n_words, n_rope, n_sbyte, n_valid
        i += 1


@gluon.jit
def _store_partial(m_i, l_i, acc, part_out_ptr, part_lse_ptr, sink_ptr, stride_sink, pid_q, pid_h, split,
                   split_offset, s_total, H, S_Q, BLOCK_H: gl.constexpr, D: gl.constexpr, HAS_SINK: gl.constexpr,
                   DIRECT: gl.constexpr):
    """The epilogue: the split's normalised output acc / l (acc: O [BLOCK_H, D] fp32, straight from the MMA
    layout: each thread's column pairs are 8-byte stores, a quad's 32 contiguous bytes) and its base-2 LSE
    m + log2(l) into the partial buffers. An empty split (l = 0) writes only its -inf LSE, which the combine
    reads as no weight; a NaN row sum is live, so NaN reaches the combine. DIRECT (a call of one split): the
    call's out (bf16, times the sink's factor; part_out_ptr is out) and lse instead, every row, as the combine
    would write them (gluon_common.store_lse)."""
    OL: gl.constexpr = acc.type.layout
    ROW: gl.constexpr = gl.SliceLayout(1, OL)
    live, lse2 = split_lse2(gl.convert_layout(m_i, ROW), gl.convert_layout(l_i, ROW))
    inv_l = gl.where(live, 1.0 / gl.convert_layout(l_i, ROW), 0.0)
    heads = pid_h * BLOCK_H + gl.arange(0, BLOCK_H, layout=ROW)
    slot = (pid_q * H + heads) * s_total + split_offset + split  # [BLOCK_H]
    f = store_lse(lse2, live, pid_q, heads, H, S_Q, part_lse_ptr, slot, sink_ptr, stride_sink, HAS_SINK, DIRECT)
    out = acc * gl.expand_dims(inv_l, 1)
    od = gl.arange(0, D, layout=gl.SliceLayout(0, OL))
    ptrs = part_out_ptr + gl.expand_dims(slot.to(gl.int64) * D, 1) + gl.expand_dims(od, 0)
    if DIRECT:  # every row; an empty one times the factor 0: zeros, or NaN where acc is NaN (as the reference; the
        # combine writes 0 there)
        gl.store(ptrs, (out * gl.expand_dims(f, 1)).to(gl.bfloat16), mask=gl.expand_dims(heads < H, 1))
    else:
        gl.store(ptrs, out, mask=gl.expand_dims((heads < H) & live, 1))


# ----------------------------------------------------------------------------- host side

def require_ws_gpu(q: torch.Tensor, name: str) -> None:
    """A RuntimeError naming the registered kernel unless q is on a GPU of sm_90 or newer (warp specialisation
    needs setmaxnreg)."""
    if q.device.type != "cuda" or torch.cuda.get_device_capability(q.device)[0] < 9:
        raise RuntimeError(f"impl={name!r} is a portable Gluon kernel (mma.sync, warp-specialised): it needs a GPU "
                           "of sm_90 or newer, e.g. sm_120 (it does not run under TRITON_INTERPRET)")


def default_config(heads: int, allowed: dict = ALLOWED) -> TiledConfig:
    """The rung's head group a program (more heads: more programs, each gathering the same tokens)."""
    return TiledConfig(BLOCK_H=allowed["BLOCK_H"][0], BLOCK_T=allowed["BLOCK_T"][0], num_warps=allowed["num_warps"][0])


def launch_portable_partial(*, q, cache, indices, topk_length, part_out, part_lse, split_offset, num_splits,
                            tokens_per_split, sm_scale, name, allowed=ALLOWED, config=None, maxnreg=MAXNREG,
                            switches=SWITCHES, kernel=None, direct=False, attn_sink=None):
    """Run the partial kernel for one KV scope into splits [split_offset, split_offset+num_splits) (the keywords of
    every split kernel: common.split_args; direct: part_out and part_lse are the call's out and lse, see
    gluon_common.epilogue_args). name, allowed: the registered rung's name and config table; switches: its
    constexprs (NUM_BUFS, PRODUCER_WARPS, PRODUCER_REGS); maxnreg: the block's register cap per thread; kernel: a
    portable kernel of the same arguments and grid (default: this module's)."""
    require_ws_gpu(q, name)
    b, s_q, h, _ = q.shape
    cfg = default_config(h, allowed) if config is None else TiledConfig.from_any(config, allowed, name)
    args = split_args(q=q, cache=cache, indices=indices, topk_length=topk_length, part_out=part_out,
                      part_lse=part_lse, split_offset=split_offset, tokens_per_split=tokens_per_split,
                      sm_scale=sm_scale)
    args.update(epilogue_args(part_lse=part_lse, direct=direct, attn_sink=attn_sink, num_splits=num_splits))
    grid = (cdiv(h, cfg.BLOCK_H), num_splits, b * s_q)
    launch(kernel or portable_ws_partial_kernel, grid, dict(**args, **cache_constexprs(cache), BLOCK_H=cfg.BLOCK_H,
                                          BLOCK_T=cfg.BLOCK_T, num_warps=cfg.num_warps, maxnreg=maxnreg,
                                          **switches))
