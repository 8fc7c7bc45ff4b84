"""Ladder rung "wgmma_ws_h64": the warp-specialised f16 kernel for a group of 64 heads, in three partitions.

wgmma_ws runs 16 heads a block: at 64 and 128 heads every token is gathered and dequantised once per 16 heads. A
64-head group in wgmma_ws's two partitions needs two consumer warpgroups of ~200 registers each (the [512, 64]
fp32 accumulator is 128 a thread) beside a producer that holds two tiles of words: no split of an SM's 65,536
registers fits, and the spills cost 1.8-3x (exploratory run, docs/decisions.md). Here, as in FlashMLA's SM90 sparse
decode, the block's three warpgroups have unequal shares:

- the softmax warpgroup (the default partition, with what the workers leave: 216 registers): S = q K^T (heads as
  M, a chain of 64x64 wgmmas), the online softmax along each head's row of tokens, P and the rescale factors
  into shared memory, and O[:, :256] += P V[:, :256];
- the PV warpgroup (PV_REGS, 160: below it ptxas ignores setmaxnreg, C7507): first q into shared memory
  (gluon_common.stage_q), while the softmax warpgroup waits for it, then O[:, 256:], rescaled by the factors,
  += P V[:, 256:];
- the producer (PRODUCER_WARPS at PRODUCER_REGS, 4 at 128; 144 in a call of one split with an attention sink,
  whose build spilled at 128 and took 1.2x the time, and over two scopes joined: producer_regs): gathers and
  dequantises each 64-token tile into a ring of NUM_BUFS K tiles, one tile of words in registers, dequantised and
  stored half a tile at a time (gluon_common.produce_range_in_halves, once a scope).

Both PV wgmmas read P from shared memory (P from registers, as FlashMLA's first warpgroup does, cost more
registers than the softmax warpgroup had: lab). q is loaded and scaled 16 heads at a time: all 64 at once are
256 fp32 a thread, and their spills serialised every wgmma of the kernel (ptxas C7515, lab). Unrolled in the
softmax warpgroup, that was ~1,800 instructions bound by instruction fetch (ncu); as a loop there, ptxas spilled
the q descriptors of the f16 softmax loop (28 LDL a tile, lab), and in the PV warpgroup, which idles until the
first P, no loop spills (a2b5140: 0.95x the time at b64 h128 topk2048, data/explore/README.md). Lab (sm_90):
206 KB of shared memory, no serialised wgmma. The bf16 rerun loads q in a layout of its own: with the f16 pass's,
LLVM merged the two passes' q addresses and kept them for the rerun, and both f16 loops (softmax and producer)
reloaded a spilled value every tile (1 LDL each, 76 B of spills in all; none in those loops now, as
`workbench.lab.sass_loops` counts them; not yet timed on a GPU).

The partitions meet at mbarriers: full/empty per K slot (both consumers hand a slot back), p_full/p_empty around
the one P buffer, done for the final row sums the PV warpgroup's half of the output needs, and q_ready. Each
consumer writes its own half of the partial output, stored evict_last so that L2 keeps it for the combine
(0.96-0.97x the time at b64 and b32 h64 topk2048, 1.00x at b16 h128 topk1024: gluon_common.store_half); a call of
one split (DIRECT) stages its bf16 halves in the free K slots and the default warps write both with 16-byte stores
(gluon_common.stage_half_direct, write_staged_half: 6.1-6.4 us a call less at b64 h128 topk 64-2048, where 0-2 us
of the gap to FlashMLA remain). K, q and P are f16 with wgmma_f16's window; a split with a non-finite row sum runs
again with bf16 operands in the same three partitions.

A call with an extra KV scope (DeepSeek-V4's production shape: topk 128 in pages of 256, an extra 512 in pages of
64) runs one launch whose splits cover each query's two index rows joined (JOINED; KernelSpec.joined_scopes): only
the producer reads the cache, so it reads a split's part of scope 1 and then its part of the extra scope, each
tiled on its own, into the one ring (gluon_common.produce_joined_scopes_in_halves), and the consumers count tiles.
A launch per scope, each planned to fill the SMs alone, and a combine took 78 us at b64 h128 on an H100 against
FlashMLA's 34.7 (docs/decisions.md); joined, b64 h128 is one split of 640 tokens and no combine.

GPU only (sm_90): Gluon does not run under the interpreter.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, warpgroup_mma,
                                                              warpgroup_mma_init, warpgroup_mma_wait)

from .common import cdiv, launch, scope_args, split_args
from .configs import TiledConfig
from .gluon_common import (F16_OUT_MULT, cache_constexprs, epilogue_args, joined_scope_constexprs, launch_dependents,
                           not_finite, produce_joined_scopes_in_halves, qk_scale, require_sm90, softmax_step,
                           split_lse2, stage_half_direct, stage_q, store_half, store_lse, write_staged_half)

ALLOWED = dict(BLOCK_H=(64,), BLOCK_T=(64,), num_warps=(4,), num_stages=(1,))
CONFIG_SPACE = [TiledConfig(BLOCK_H=64, BLOCK_T=64, num_warps=4)]
# 2 K slots: q (64 KB) + 2 x 64 KB + P (8 KB) fit sm_90's 232,448 B a block, 3 slots do not. Registers (lab,
# sm_90): the default partition gets what the two workers leave of 65,536 over 384 threads. The producer's 128 (112
# before, with 232 for the softmax warpgroup): its loop issues a half tile's next gathers as soon as that half is
# stored, which spilled at 112 (lab: 26 LDL and 18 STL a tile) and took 0.93-0.96x the time at two head groups and
# b64 h64, 1.00-1.02x at splits of 128-256 tokens (data/explore/explore_h100_20261206-1011_half_rotation.csv); at
# 128 without that order, 1.07x at b64 h128
SWITCHES = dict(NUM_BUFS=2, PV_REGS=160, PRODUCER_WARPS=4, PRODUCER_REGS=128)
MAXNREG = 168  # 65,536 registers over the block's 12 warps, rounded down to a multiple of 8


def estimate_shared_bytes(c: TiledConfig, NUM_BUFS: int = 2, **_switches) -> int:
    """Shared bytes of one block (sm_90 lab: 205,992 B): q (1 KB/head), NUM_BUFS 16-bit K tiles (1 KB/token) and P
    (2 B/token/head), then six small arrays each taken as a whole 128 B or more: the valid bytes, the rescale
    factors, the final row sums and maxima, and the three groups of mbarriers."""
    t, h = c.BLOCK_T, c.BLOCK_H
    small = (NUM_BUFS * t, 4 * h, 8 * h, 8 * NUM_BUFS, 8 * NUM_BUFS, 8 * 4)
    return 1024 * h + NUM_BUFS * 1024 * t + 2 * t * h + sum(-(-b // 128) * 128 for b in small)


@gluon.jit
def ws_h64_partial_kernel(
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
    # the extra scope (JOINED: read after scope 1's tokens, in one stream; else scope 1's arguments stand in, unread)
    x_cache_u8, x_stride_page, x_block_size, x_num_tokens,
    x_idx_ptr,        # [b, s_q, x_topk] int32
    x_stride_ib, x_stride_is,
    x_topk_len_ptr, x_stride_tl,  # [b] int32 (read only when X_HAS_TOPK_LEN)
    X_TOPK,
    HAS_TOPK_LEN: gl.constexpr,
    D_NOPE: gl.constexpr, D_ROPE: gl.constexpr, TILE: gl.constexpr, DATA_BYTES: gl.constexpr,
    SCALE_BYTES: gl.constexpr,
    BLOCK_H: gl.constexpr, BLOCK_T: gl.constexpr, BS_SHIFT: gl.constexpr,
    NUM_BUFS: gl.constexpr,            # K tiles in the ring
    PV_REGS: gl.constexpr,             # registers per thread of the PV warpgroup (setmaxnreg)
    PRODUCER_WARPS: gl.constexpr,      # warps of the producer partition
    PRODUCER_REGS: gl.constexpr,       # and its registers per thread; the softmax warpgroup gets the rest
    LEAVE_OUT: gl.constexpr = 0,       # measurement only: gluon_common.LEAVE_OUT_BITS; wrong output
    PF_AHEAD: gl.constexpr = 1,        # the producer asks L2 for the tile this many ahead of the one it gathers
                                       # (the launcher's choice: prefetch_ahead)
    HAS_SINK: gl.constexpr = False,
    DIRECT: gl.constexpr = False,      # one split in all: write out and lse as the combine would (epilogue_args)
    JOINED: gl.constexpr = False,      # splits over the two scopes' index rows joined: [0, TOPK + X_TOPK)
    X_HAS_TOPK_LEN: gl.constexpr = False,
    X_BS_SHIFT: gl.constexpr = -1,     # the extra scope's BS_SHIFT
):
    KT: gl.constexpr = gl.float16  # the MMA operands' type: K, q, P (bf16 in the rerun)
    D: gl.constexpr = D_NOPE + D_ROPE
    K_SMEM: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16)
    Q_SMEM: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, D], KT)
    P_SMEM: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, BLOCK_T], KT)
    FLAT: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])

    pid_h = gl.program_id(0)
    split = gl.program_id(1)
    pid_q = gl.program_id(2)
    bi = pid_q // S_Q
    si = pid_q % S_Q

    q_smem = gl.allocate_shared_memory(KT, [BLOCK_H, D], Q_SMEM)            # written by the softmax warpgroup
    k_smem = gl.allocate_shared_memory(KT, [NUM_BUFS, BLOCK_T, D], K_SMEM)
    valid_smem = gl.allocate_shared_memory(gl.int8, [NUM_BUFS, BLOCK_T], FLAT)
    p_smem = gl.allocate_shared_memory(KT, [BLOCK_H, BLOCK_T], P_SMEM)      # P [heads, tokens] for the PV warpgroup
    alpha_smem = gl.allocate_shared_memory(gl.float32, [BLOCK_H], FLAT)     # the tile's rescale factors
    lsum_smem = gl.allocate_shared_memory(gl.float32, [2, BLOCK_H], FLAT)   # the final row sums and maxima
    full = gl.allocate_shared_memory(gl.int64, [NUM_BUFS, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_BUFS, 1], mbarrier.MBarrierLayout())
    sync = gl.allocate_shared_memory(gl.int64, [4, 1], mbarrier.MBarrierLayout())  # p_full, p_empty, done, q_ready
    _init_barriers(full, empty, sync, NUM_BUFS, False)

    end_all = TOPK
    if HAS_TOPK_LEN:
        end_all = gl.minimum(gl.load(topk_len_ptr + bi * stride_tl), TOPK)
    start = split * tokens_per_split
    end = gl.minimum(start + tokens_per_split, end_all)
    idx_row = idx_ptr + bi * stride_ib + si * stride_is
    # the tiles the consumers count: scope 1's part of the split, then (JOINED) the extra scope's, each tiled alone
    # (the extra scope's part [x_start, x_end) in its own index row's positions)
    x_idx_row = x_idx_ptr + bi * x_stride_ib + si * x_stride_is
    x_start = start
    x_end = start
    tiles_start = start
    tiles_end = end
    if JOINED:
        x_end_all = X_TOPK
        if X_HAS_TOPK_LEN:
            x_end_all = gl.minimum(gl.load(x_topk_len_ptr + bi * x_stride_tl), X_TOPK)
        x_start = gl.maximum(start - TOPK, 0)
        x_end = gl.minimum(start + tokens_per_split - TOPK, x_end_all)
        tiles = gl.cdiv(gl.maximum(end - start, 0), BLOCK_T) + gl.cdiv(gl.maximum(x_end - x_start, 0), BLOCK_T)
        tiles_start = 0
        tiles_end = tiles * BLOCK_T
    q_row = q_ptr + bi * stride_qb + si * stride_qs
    slot0 = pid_q * H * s_total + split_offset + split  # the partial slot of head 0; head j's is + j * s_total

    m_i, l_i, acc = _pass(q_smem, k_smem, valid_smem, p_smem, alpha_smem, lsum_smem, full, empty, sync, start, end,
                          q_row, stride_qh, pid_h, H, sm_scale_log2, cache_u8, stride_page, block_size, num_tokens,
                          idx_row, part_out_ptr, slot0, s_total, sink_ptr, stride_sink, D_NOPE, D_ROPE, TILE,
                          DATA_BYTES, SCALE_BYTES, BLOCK_H, BLOCK_T, BS_SHIFT, NUM_BUFS, PV_REGS, PRODUCER_WARPS,
                          PRODUCER_REGS, 1, LEAVE_OUT, HAS_SINK, DIRECT, x_cache_u8, x_stride_page, x_block_size,
                          x_num_tokens, x_idx_row, x_start, x_end, tiles_start, tiles_end, X_BS_SHIFT, JOINED,
                          PF_AHEAD=PF_AHEAD)
    bad = not_finite(l_i)  # a token outside the f16 window makes some row sum non-finite
    out_mult = gl.where(bad, 1.0, F16_OUT_MULT)
    if bad:  # rare: the split again with bf16 operands in the same three partitions; each rewrites its half
        _init_barriers(full, empty, sync, NUM_BUFS, True)
        m_i, l_i, acc = _pass(q_smem._reinterpret(gl.bfloat16, [BLOCK_H, D], Q_SMEM),
                              k_smem._reinterpret(gl.bfloat16, [NUM_BUFS, BLOCK_T, D], K_SMEM), valid_smem,
                              p_smem._reinterpret(gl.bfloat16, [BLOCK_H, BLOCK_T], P_SMEM), alpha_smem, lsum_smem,
                              full, empty, sync, start, end, q_row, stride_qh, pid_h, H, sm_scale_log2, cache_u8,
                              stride_page, block_size, num_tokens, idx_row, part_out_ptr, slot0, s_total, sink_ptr,
                              stride_sink, D_NOPE, D_ROPE, TILE, DATA_BYTES, SCALE_BYTES, BLOCK_H, BLOCK_T, BS_SHIFT,
                              NUM_BUFS, PV_REGS, PRODUCER_WARPS, PRODUCER_REGS, 0, LEAVE_OUT, HAS_SINK, DIRECT,
                              x_cache_u8, x_stride_page, x_block_size, x_num_tokens, x_idx_row, x_start, x_end,
                              tiles_start, tiles_end, X_BS_SHIFT, JOINED, PF_AHEAD=PF_AHEAD)
    if DIRECT:  # the K ring is free once the passes are done; the PV warpgroup's half waits in slot 1
        stage_half_direct(acc, m_i, l_i, out_mult, pid_h, H, sink_ptr, stride_sink, k_smem.index(0), BLOCK_H, D,
                          HAS_SINK)
        gl.thread_barrier()
        write_staged_half(part_out_ptr, slot0, pid_h, H, s_total, k_smem.index(0), BLOCK_H, D, 0)
        write_staged_half(part_out_ptr, slot0, pid_h, H, s_total, k_smem.index(1), BLOCK_H, D, 1)
    else:
        store_half(acc, m_i, l_i, out_mult, part_out_ptr, slot0, pid_h, H, s_total, sink_ptr, stride_sink, BLOCK_H, D,
                   0, HAS_SINK, DIRECT, KEEP=True)
    # the split's LSE, from the softmax warpgroup's row statistics
    live, lse2 = split_lse2(m_i, l_i)
    heads = pid_h * BLOCK_H + gl.arange(0, BLOCK_H, layout=l_i.type.layout)
    store_lse(lse2, live, pid_q, heads, H, S_Q, part_lse_ptr, slot0 + heads * s_total, sink_ptr, stride_sink,
              HAS_SINK, DIRECT, KEEP=True)


@gluon.jit
def _init_barriers(full, empty, sync, NUM_BUFS: gl.constexpr, AGAIN: gl.constexpr):
    """Every mbarrier fresh (AGAIN: after the first pass, invalidated first). A slot is handed back by both
    consumer warpgroups, so empty counts 2."""
    for i in gl.static_range(NUM_BUFS):
        if AGAIN:
            mbarrier.invalidate(full.index(i))
            mbarrier.invalidate(empty.index(i))
        mbarrier.init(full.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
    for i in gl.static_range(4):
        if AGAIN:
            mbarrier.invalidate(sync.index(i))
        mbarrier.init(sync.index(i), count=1)
    fence_async_shared()  # the barriers' init before any partition uses them


@gluon.jit
def _pass(q_smem, k_smem, valid_smem, p_smem, alpha_smem, lsum_smem, full, empty, sync, start, end, q_row, stride_qh,
          pid_h, H, sm_scale_log2, cache_u8, stride_page, block_size, num_tokens, idx_row, part_out_ptr, slot0,
          s_total, sink_ptr, stride_sink, D_NOPE: gl.constexpr, D_ROPE: gl.constexpr, TILE: gl.constexpr,
          DATA_BYTES: gl.constexpr, SCALE_BYTES: gl.constexpr, BLOCK_H: gl.constexpr, BLOCK_T: gl.constexpr,
          BS_SHIFT: gl.constexpr, NUM_BUFS: gl.constexpr, PV_REGS: gl.constexpr, PRODUCER_WARPS: gl.constexpr,
          PRODUCER_REGS: gl.constexpr, F16: gl.constexpr, LEAVE_OUT: gl.constexpr, HAS_SINK: gl.constexpr,
          DIRECT: gl.constexpr, x_cache_u8, x_stride_page, x_block_size, x_num_tokens, x_idx_row, x_start, x_end,
          tiles_start, tiles_end, X_BS_SHIFT: gl.constexpr, JOINED: gl.constexpr, PF_AHEAD: gl.constexpr = 1):
    """One pass over the split in the three partitions (F16: the f16 pass, which also signals the combine's
    launch; else the bf16 rerun); returns the softmax warpgroup's (m_i, l_i, O[:, :D/2]). The producer reads
    scope 1's [start, end) (JOINED: then the extra scope's [x_start, x_end)); the consumers count its tiles as
    range(tiles_start, tiles_end, BLOCK_T) (without JOINED, start and end)."""
    D: gl.constexpr = D_NOPE + D_ROPE
    return gl.warp_specialize([
        (_softmax_warpgroup, (q_smem, k_smem, valid_smem, p_smem, alpha_smem, lsum_smem, full, empty, sync,
                              tiles_start, tiles_end, sm_scale_log2, BLOCK_H, BLOCK_T, D, NUM_BUFS, F16, LEAVE_OUT)),
        (_pv_warpgroup, (q_smem, k_smem, p_smem, alpha_smem, lsum_smem, full, empty, sync, tiles_start, tiles_end,
                         q_row, stride_qh, part_out_ptr, slot0, pid_h, H, s_total, sink_ptr, stride_sink, BLOCK_H,
                         BLOCK_T, D, NUM_BUFS, F16, LEAVE_OUT, HAS_SINK, DIRECT)),
        (produce_joined_scopes_in_halves, (k_smem, valid_smem, full, empty, cache_u8, stride_page, block_size,
                                           num_tokens, idx_row, start, end, x_cache_u8, x_stride_page, x_block_size,
                                           x_num_tokens, x_idx_row, x_start, x_end, D_NOPE, D_ROPE, TILE, DATA_BYTES,
                                           SCALE_BYTES, BLOCK_T, BS_SHIFT, X_BS_SHIFT, NUM_BUFS, F16, LEAVE_OUT,
                                           PF_AHEAD, JOINED)),
    ], [4, PRODUCER_WARPS], [PV_REGS, PRODUCER_REGS])


@gluon.constexpr_function
def _half_layout(BLOCK_H, D):
    """O [BLOCK_H, D/2] fp32 of one warpgroup: one wgmma of N = D/2 a K step."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D // 2, 16])


@gluon.jit
def _softmax_warpgroup(q_smem, k_smem, valid_smem, p_smem, alpha_smem, lsum_smem, full, empty, sync, start, end,
                       sm_scale_log2, BLOCK_H: gl.constexpr, BLOCK_T: gl.constexpr, D: gl.constexpr,
                       NUM_BUFS: gl.constexpr, F16: gl.constexpr, LEAVE_OUT: gl.constexpr):
    """Once the PV warpgroup has staged q (scaled per head with F16), per full slot: S = q K^T, the online softmax,
    P and the rescale factors to the PV warpgroup, O[:, :D/2] += P V[:, :D/2] with P from shared memory; returns
    (m_i, l_i, O[:, :D/2]). The final l_i and m_i also go to lsum_smem for the PV warpgroup."""
    KT: gl.constexpr = gl.float16 if F16 else gl.bfloat16
    DH: gl.constexpr = D // 2
    SL: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                 instr_shape=[16, BLOCK_T, 16])  # S [BLOCK_H, BLOCK_T]
    # the PV warpgroup stages q (it idles until the first P); each head's exponent passes through alpha_smem
    # (free until the loop) into the scores' layout
    mbarrier.wait(sync.index(3), 0)
    if F16:
        q_exp = alpha_smem.load(gl.SliceLayout(1, SL)).to(gl.int32)
        gl.thread_barrier()  # every warp has its exponents before the first factors overwrite them
    else:
        q_exp = gl.zeros([BLOCK_H], gl.int32, layout=gl.SliceLayout(1, SL))
    OL: gl.constexpr = _half_layout(BLOCK_H, D)
    p_full = sync.index(0)
    p_empty = sync.index(1)
    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=gl.SliceLayout(1, SL))
    l_i = gl.zeros([BLOCK_H], gl.float32, layout=gl.SliceLayout(1, SL))
    acc = warpgroup_mma_init(gl.zeros([BLOCK_H, DH], gl.float32, layout=OL))
    s_zero = gl.zeros([BLOCK_H, BLOCK_T], gl.float32, layout=SL)
    scale = qk_scale(sm_scale_log2, q_exp, F16)
    i = 0
    for t0 in range(start, end, BLOCK_T):
        buf = i % NUM_BUFS
        # the previous slot goes back once its PV has retired in every warp, before this tile's wait and QK, not
        # after the softmax: the producer dequantises a tile only once it has a slot, so a late hand-back put that
        # on this chain. (Between QK's issue and wait the arrive is sunk by ptxas to the next barrier, past the
        # softmax, and a wait for the PV alone with QK in flight serialises every wgmma: sm_90 lab.)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        gl.thread_barrier()
        mbarrier.arrive(empty.index((i + NUM_BUFS - 1) % NUM_BUFS), pred=i > 0)
        mbarrier.wait(full.index(buf), (i // NUM_BUFS) & 1)
        kb = k_smem.index(buf)
        # the valid bytes are read while QK runs: read after its wait, their shared loads were a tenth of this
        # warpgroup's stall samples (ncu source counters at b64 h128, docs/decisions.md)
        v = valid_smem.index(buf).load(gl.SliceLayout(0, SL)) != 0
        if LEAVE_OUT & 8:  # no QK MMA: constant scores
            s = s_zero + 1.0
        else:
            s = warpgroup_mma(q_smem, kb.permute((1, 0)), s_zero, use_acc=False, is_async=True)  # [BLOCK_H, BLOCK_T]
            s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
        p, alpha, m_i = softmax_step(s, v, m_i, scale, F16, LEAVE_OUT & 4, 1)
        l_i = l_i * alpha + gl.sum(p, 1)
        pk = p.to(KT)
        mbarrier.wait(p_empty, (i & 1) ^ 1)  # the PV warpgroup has read the last P and factors
        p_smem.store(pk)
        alpha_smem.store(alpha)
        fence_async_shared()  # P before the PV warpgroup's wgmma reads it
        gl.thread_barrier()   # every warp's P and factors before the arrive
        mbarrier.arrive(p_full)
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, OL)), 1)
        if LEAVE_OUT & 16:  # no PV MMA: the accumulator keeps its rescaled zeros
            acc = warpgroup_mma_init(acc)
        else:
            acc = warpgroup_mma(p_smem, kb.slice(0, DH, dim=1), acc, is_async=True)
        i += 1
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    if F16:  # the combine's launch overlaps the epilogue (and a bf16 pass, if one follows)
        launch_dependents()
    lsum_smem.index(0).store(l_i)
    lsum_smem.index(1).store(m_i)
    gl.thread_barrier()
    mbarrier.arrive(sync.index(2))
    return m_i, l_i, acc


@gluon.jit
def _pv_warpgroup(q_smem, k_smem, p_smem, alpha_smem, lsum_smem, full, empty, sync, start, end, q_row, stride_qh,
                  part_out_ptr, slot0, pid_h, H, s_total, sink_ptr, stride_sink, BLOCK_H: gl.constexpr,
                  BLOCK_T: gl.constexpr, D: gl.constexpr, NUM_BUFS: gl.constexpr, F16: gl.constexpr,
                  LEAVE_OUT: gl.constexpr, HAS_SINK: gl.constexpr, DIRECT: gl.constexpr):
    """q into q_smem (with F16 scaled per head, as wgmma_f16; the exponents into alpha_smem) for the softmax
    warpgroup, then per tile: O[:, D/2:] rescaled by the softmax warpgroup's factors, += P V[:, D/2:]; then this
    half of the split's normalised output into the partial buffer (DIRECT: the call's out, staged in K slot 1)."""
    DH: gl.constexpr = D // 2
    OL: gl.constexpr = _half_layout(BLOCK_H, D)
    ROW: gl.constexpr = gl.SliceLayout(1, OL)
    p_full = sync.index(0)
    p_empty = sync.index(1)
    stage_q(q_smem, alpha_smem, q_row, stride_qh, pid_h, H, BLOCK_H, D, F16)
    fence_async_shared()  # q before the softmax warpgroup's first wgmma reads it
    gl.thread_barrier()   # every warp's rows before the arrive
    mbarrier.arrive(sync.index(3))
    acc = gl.zeros([BLOCK_H, DH], gl.float32, layout=OL)
    i = 0
    for t0 in range(start, end, BLOCK_T):
        buf = i % NUM_BUFS
        mbarrier.wait(full.index(buf), (i // NUM_BUFS) & 1)
        mbarrier.wait(p_full, i & 1)
        acc = acc * gl.expand_dims(alpha_smem.load(ROW), 1)
        if not (LEAVE_OUT & 16):  # (no PV MMA: the accumulator keeps its rescaled zeros)
            acc = warpgroup_mma(p_smem, k_smem.index(buf).slice(DH, DH, dim=1), acc)
        gl.thread_barrier()  # every warp's wgmma has read P and the slot, and every warp has read the factors
        mbarrier.arrive(p_empty)
        mbarrier.arrive(empty.index(buf))
        i += 1
    mbarrier.wait(sync.index(2), 0)
    l_i = lsum_smem.index(0).load(ROW)
    m_i = lsum_smem.index(1).load(ROW)
    # F16: a non-finite row sum makes this half non-finite too, and the bf16 pass writes it again
    if DIRECT:  # every K slot is free (the softmax warpgroup's last PV has retired, sync 2): the default warps
        # write this half out after the passes
        stage_half_direct(acc, m_i, l_i, F16_OUT_MULT if F16 else 1.0, pid_h, H, sink_ptr, stride_sink,
                          k_smem.index(1), BLOCK_H, D, HAS_SINK)
    else:
        store_half(acc, m_i, l_i, F16_OUT_MULT if F16 else 1.0, part_out_ptr, slot0, pid_h, H, s_total, sink_ptr,
                   stride_sink, BLOCK_H, D, 1, HAS_SINK, DIRECT, KEEP=True)


def default_config(heads: int, allowed: dict = ALLOWED) -> TiledConfig:
    """64 heads a program (more heads: more programs, each gathering the same tokens)."""
    return TiledConfig(BLOCK_H=64, BLOCK_T=64, num_warps=4)


def prefetch_ahead(head_groups: int, tokens_per_split: int) -> int:
    """The kernel's PF_AHEAD for a call of this many 64-head groups and tokens a split: 2 where a query's tokens are
    gathered by two groups' blocks or more and a split holds 8 tiles or more (512 tokens), else 1. Measured on an
    H100 (same-call A/Bs, data/explore/README.md, the prefetch distance): two tiles ahead took 0.94-0.97x the time
    at 96 and 128 heads from b16 topk2048 (b64 h128 topk2048 106.3 -> 101.5 us, b128 h128 0.94x), but 1.01-1.02x at
    b8 h128 topk2048 and b16 h128 topk1024 and 1.02x at b64 h64, and three tiles ahead was slower than two at every
    shape timed; the partial crossover at 11c3638 had b16 and b32 h128 topk512 at 1.02-1.03x. Every loss at two
    groups was at splits of 128-256 tokens, every gain at 512 or more (in-sample); this split bound then took 0.96-
    0.98x the time at b16 and b32 h128 topk512 and b8 h128 topk2048 (data/explore/explore_h100_20261206-0836_split_
    bound_index_queue_rule.csv). Why two groups gain and one does not is not profiled. The producer takes 1 or 2
    (a static_assert)."""
    return 2 if head_groups > 1 and tokens_per_split >= 512 else 1


def producer_regs(direct: bool, has_sink: bool, joined: bool = False) -> int:
    """The producer's registers (setmaxnreg; the softmax warpgroup gets what it leaves): SWITCHES' 128, or 144 in a
    call of one split with an attention sink, or over two scopes joined. The joined build's f16 producer loops (one a
    scope) spill 14 and 10 LDL a tile at 128, 1 and 4 at 136, 0 and 0 at 144 (sm_90 lab, one tile ahead; two ahead:
    7 and 8, 1 and 9, 4 and 3); at the production shape on an H100 (one call,
    data/explore/explore_h100_20261207-1743_joined_scopes.csv) 144 took b64 h128 37.37 us against 40.72 at 128 (136:
    37.95), b128 h128 71.60 against 77.89, b64 h64 34.41 against 37.83, b16 h128 23.21 against 24.23, b32 h64 25.04
    against 26.27; 152 was 0.1-1.4 us slower than 144 with a sink (..._1751_joined_scopes_sink.csv).
    The one-split build with a sink: its f16 producer loop spills 6 LDL / 6 STL a tile at 128 (sm_90 lab), and
    on an H100 it took 106.75 us at b64 h128 topk2048 against 86.08 without the sink; at 144, 88.41
    (136: 89.39), and 35.42 -> 32.08 us at topk512, while without a sink 144 took 91.02 against 86.08 (the softmax
    warpgroup's share shrinks): data/explore/explore_h100_20261206-2048_sink_producer_regs.csv. No other build
    spills so (a one-scope call of several splits applies the sink in the combine)."""
    return 144 if joined or (direct and has_sink) else SWITCHES["PRODUCER_REGS"]


def launch_ws_h64_partial(*, q, cache, indices, topk_length, part_out, part_lse, split_offset, num_splits,
                          tokens_per_split, sm_scale, name, allowed=ALLOWED, config=None, maxnreg=MAXNREG,
                          switches=SWITCHES, LEAVE_OUT=0, direct=False, attn_sink=None, extra_cache=None,
                          extra_indices=None, extra_topk_length=None):
    """Run the three-partition partial kernel for one KV scope into splits [split_offset, split_offset+num_splits)
    (direct: part_out and part_lse are the call's out and lse, see gluon_common.epilogue_args); with extra_cache,
    over both scopes as one stream of indices (KernelSpec.joined_scopes): each query's scope-1 row and then its
    extra row, tokens_per_split of them a split (a split may hold the end of one and the start of the other).

    name, allowed: the registered rung's name and config table; switches: its constexprs (SWITCHES); LEAVE_OUT:
    stages to drop, for a measurement (workbench.bench.isolate). PF_AHEAD: :func:`prefetch_ahead`'s, unless switches
    names one (an A/B); PRODUCER_REGS: :func:`producer_regs`'s, unless switches name another count than SWITCHES'."""
    require_sm90(q, name)
    b, s_q, h, _ = q.shape
    cfg = default_config(h, allowed) if config is None else TiledConfig.from_any(config, allowed, name)
    args = split_args(q=q, cache=cache, indices=indices, topk_length=topk_length, part_out=part_out,
                      part_lse=part_lse, split_offset=split_offset, tokens_per_split=tokens_per_split,
                      sm_scale=sm_scale)
    args.update(epilogue_args(part_lse=part_lse, direct=direct, attn_sink=attn_sink, num_splits=num_splits))
    joined = extra_cache is not None
    if joined and (extra_indices is None or extra_indices.shape[:2] != indices.shape[:2]):
        raise ValueError(f"extra_indices: [b, s_q, extra_topk] for extra_cache, as indices' {tuple(indices.shape[:2])}"
                         f", got {None if extra_indices is None else tuple(extra_indices.shape)}")
    if joined and num_splits * tokens_per_split < indices.shape[2] + extra_indices.shape[2]:
        raise ValueError(f"num_splits x tokens_per_split: {num_splits} x {tokens_per_split} tokens do not cover the "
                         f"joined scopes' {indices.shape[2]} + {extra_indices.shape[2]} indices")
    # the extra scope's arguments; with one scope, unread stand-ins: scope 1's own
    args.update(scope_args("x_", *((extra_cache, extra_indices, extra_topk_length) if joined else
                                   (cache, indices, topk_length)), views=("cache_u8",)),
                X_TOPK=extra_indices.shape[2] if joined else 0, X_HAS_TOPK_LEN=joined and extra_topk_length is not None,
                JOINED=joined)
    constexprs = joined_scope_constexprs(cache, extra_cache) if joined else cache_constexprs(cache)
    grid = (cdiv(h, cfg.BLOCK_H), num_splits, b * s_q)
    switches = {"PF_AHEAD": prefetch_ahead(grid[0], tokens_per_split), **switches}
    # the registry passes a copy of SWITCHES, so a count equal to SWITCHES' reads as not named: an A/B that names
    # another count keeps it, one that names 128 gets producer_regs' count (144 joined, or in a one-split call with a
    # sink), so the joined build at 128 cannot be timed from here (its rows: 4ba3b9f, before this rule)
    if switches.get("PRODUCER_REGS") == SWITCHES["PRODUCER_REGS"]:
        switches["PRODUCER_REGS"] = producer_regs(direct, attn_sink is not None, joined)
    launch(ws_h64_partial_kernel, grid, dict(**args, **constexprs, BLOCK_H=cfg.BLOCK_H,
                                             BLOCK_T=cfg.BLOCK_T, num_warps=cfg.num_warps, maxnreg=maxnreg,
                                             LEAVE_OUT=LEAVE_OUT, **switches))
