"""Ladder rung "wgmma_ws_bal": wgmma_ws_h64 with its two consumer warpgroups given equal work.

In wgmma_ws_h64 the softmax warpgroup runs QK (64 heads x 64 tokens x 512), the softmax and half of PV, while the
PV warpgroup runs the other half of PV: three times the MMA work on one side. ncu of it at b64 h128 topk2048
(data/ncu/c6506d3_ncu_wgmma_ws_h64_h128.txt) puts the softmax warpgroup on the critical path while the PV
warpgroup waits at its mbarriers for 76% of its samples. Here the two consumer warpgroups run the same code:

- warpgroup w scores its half of each 64-token tile, S_w = q K_w^T (K_w: tokens w*32.. of the tile, a K slot of
  its own), so each carries half of QK;
- they swap their rows' maxima through shared memory (one mbarrier a tile), so both hold the same running max
  and the same rescale factors, and each writes its P_w [heads, 32 tokens] to shared memory;
- each then runs PV for its half of the output columns over the whole tile: O_w += P_0 V_0[:, w] + P_1 V_1[:, w],
  its own P first and the other's after a second mbarrier.

The producer is wgmma_ws_h64's, storing each half tile into a slot of its own. It is the default partition here
(4 warps at what the consumers leave): the default partition also keeps the kernel's own values alive across the
pass for the bf16 rerun, and as a consumer at 200 registers that spilled in its loop (lab, sm_90). Its consumers
have 184 (200 until the producer took its next half tile's gathers early, which spilled at 104: lab); with that
producer it took 1.12-1.20x its time at the large calls (data/explore/explore_h100_20261206-1011_half_rotation.csv,
not profiled).
P and the swapped maxima are double-buffered by tile parity, so one mbarrier a tile for each is enough: a
warpgroup passes tile i's only after both have retired tile i-1's PV, which last read the buffers it writes.

K, q and P are f16 with wgmma_f16's window; a split with a non-finite row sum runs again with bf16 operands.

GPU only (sm_90): Gluon does not run under the interpreter.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, warpgroup_mma,
                                                              warpgroup_mma_init, warpgroup_mma_wait)

from .common import cdiv, launch, split_args
from .configs import TiledConfig
from .gluon_common import (F16_OUT_MULT, cache_constexprs, epilogue_args, launch_dependents, load_q, not_finite,
                           produce_k_tiles_in_halves, qk_scale, require_sm90, scale_q_per_head, split_lse2,
                           store_half, store_lse)

ALLOWED = dict(BLOCK_H=(64,), BLOCK_T=(64,), num_warps=(4,), num_stages=(1,))
CONFIG_SPACE = [TiledConfig(BLOCK_H=64, BLOCK_T=64, num_warps=4)]
# 2 K slots (4 half slots): q (64 KB) + 2 x 64 KB + P (16 KB) fit sm_90's 232,448 B a block. Registers: each
# consumer warpgroup CONSUMER_REGS, the producer (default partition) what they leave of MAXNREG * 3
SWITCHES = dict(NUM_BUFS=2, CONSUMER_REGS=184)
MAXNREG = 168  # 65,536 registers over the block's 12 warps, rounded down to a multiple of 8
_SYNC = gl.constexpr(4)  # mbarriers: the maxima swapped, both P written, q written, the final row sums written


def estimate_shared_bytes(c: TiledConfig, NUM_BUFS: int = 2, **_switches) -> int:
    """Shared bytes of one block: q (1 KB/head), NUM_BUFS 16-bit K tiles (1 KB/token), P twice (2 B/token/head
    each), then the small arrays each taken as a whole 128 B or more: the valid bytes, the swapped maxima (two
    tiles x two warpgroups), the row sums of both, q's exponents and the mbarriers."""
    t, h = c.BLOCK_T, c.BLOCK_H
    small = (NUM_BUFS * t, 16 * h, 8 * h, 4 * h, 8 * NUM_BUFS, 8 * NUM_BUFS, 8 * _SYNC.value)
    return 1024 * h + NUM_BUFS * 1024 * t + 4 * t * h + sum(-(-b // 128) * 128 for b in small)


@gluon.jit
def ws_bal_partial_kernel(
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
    NUM_BUFS: gl.constexpr,            # K tiles in the ring (each as two half slots)
    CONSUMER_REGS: gl.constexpr,       # registers per thread of each consumer warpgroup (setmaxnreg)
    LEAVE_OUT: gl.constexpr = 0,       # measurement only: gluon_common.LEAVE_OUT_BITS; wrong output
    HAS_SINK: gl.constexpr = False,
    DIRECT: gl.constexpr = False,      # one split in all: write out and lse as the combine would (epilogue_args)
):
    KT: gl.constexpr = gl.float16  # the MMA operands' type: K, q, P (bf16 in the rerun)
    D: gl.constexpr = D_NOPE + D_ROPE
    HT: gl.constexpr = BLOCK_T // 2
    K_SMEM: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16)
    Q_SMEM: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, D], KT)
    P_SMEM: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, HT], KT)
    FLAT: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])

    pid_h = gl.program_id(0)
    split = gl.program_id(1)
    pid_q = gl.program_id(2)
    bi = pid_q // S_Q
    si = pid_q % S_Q

    q_smem = gl.allocate_shared_memory(KT, [1, BLOCK_H, D], Q_SMEM)          # each consumer writes half the heads
    k_smem = gl.allocate_shared_memory(KT, [2 * NUM_BUFS, HT, D], K_SMEM)    # slot b's halves: 2b, 2b+1
    valid_smem = gl.allocate_shared_memory(gl.int8, [NUM_BUFS, BLOCK_T], FLAT)
    p_smem = gl.allocate_shared_memory(KT, [4, BLOCK_H, HT], P_SMEM)         # [tile parity * 2 + warpgroup]
    max_smem = gl.allocate_shared_memory(gl.float32, [4, BLOCK_H], FLAT)    # the same index: each one's row maxima
    lsum_smem = gl.allocate_shared_memory(gl.float32, [2, BLOCK_H], FLAT)   # each one's final row sums
    qexp_smem = gl.allocate_shared_memory(gl.int32, [BLOCK_H], FLAT)         # each head's q exponent
    full = gl.allocate_shared_memory(gl.int64, [NUM_BUFS, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_BUFS, 1], mbarrier.MBarrierLayout())
    sync = gl.allocate_shared_memory(gl.int64, [_SYNC, 1], mbarrier.MBarrierLayout())
    _init_barriers(full, empty, sync, NUM_BUFS, False)

    end_all = TOPK
    if HAS_TOPK_LEN:
        end_all = gl.minimum(gl.load(topk_len_ptr + bi * stride_tl), TOPK)
    start = split * tokens_per_split
    end = gl.minimum(start + tokens_per_split, end_all)
    idx_row = idx_ptr + bi * stride_ib + si * stride_is
    q_row = q_ptr + bi * stride_qb + si * stride_qs
    slot0 = pid_q * H * s_total + split_offset + split  # the partial slot of head 0; head j's is + j * s_total

    _pass(q_smem, k_smem, valid_smem, p_smem, max_smem, lsum_smem, qexp_smem, full, empty, sync, start, end, q_row,
          stride_qh, pid_h, H, sm_scale_log2, cache_u8, stride_page, block_size, num_tokens, idx_row, part_out_ptr,
          part_lse_ptr, slot0, s_total, pid_q, S_Q, sink_ptr, stride_sink, D_NOPE, D_ROPE, TILE, DATA_BYTES,
          SCALE_BYTES, BLOCK_H, BLOCK_T, BS_SHIFT, NUM_BUFS, CONSUMER_REGS, 1, LEAVE_OUT, HAS_SINK, DIRECT)
    # the row sums the consumers left in shared memory (the partitions have joined)
    l_all = lsum_smem.index(0).load(gl.BlockedLayout([1], [32], [gl.num_warps()], [0]))
    l_all += lsum_smem.index(1).load(l_all.type.layout)
    if not_finite(l_all):  # rare: the split again with bf16 operands in the same partitions; each rewrites its part
        _init_barriers(full, empty, sync, NUM_BUFS, True)
        _pass(q_smem._reinterpret(gl.bfloat16, [1, BLOCK_H, D], Q_SMEM),
                         k_smem._reinterpret(gl.bfloat16, [2 * NUM_BUFS, HT, D], K_SMEM), valid_smem,
                         p_smem._reinterpret(gl.bfloat16, [4, BLOCK_H, HT], P_SMEM), max_smem, lsum_smem, qexp_smem,
                         full, empty, sync, start, end, q_row, stride_qh, pid_h, H, sm_scale_log2, cache_u8,
                         stride_page, block_size, num_tokens, idx_row, part_out_ptr, part_lse_ptr, slot0, s_total,
                         pid_q, S_Q, sink_ptr, stride_sink, D_NOPE, D_ROPE, TILE, DATA_BYTES, SCALE_BYTES, BLOCK_H,
                         BLOCK_T, BS_SHIFT, NUM_BUFS, CONSUMER_REGS, 0, LEAVE_OUT, HAS_SINK, DIRECT)


@gluon.jit
def _init_barriers(full, empty, sync, NUM_BUFS: gl.constexpr, AGAIN: gl.constexpr):
    """Every mbarrier fresh (AGAIN: after the first pass, invalidated first). Both consumer warpgroups arrive on
    each: a slot handed back, their maxima, their P, their q and their row sums."""
    for i in gl.static_range(NUM_BUFS):
        if AGAIN:
            mbarrier.invalidate(full.index(i))
            mbarrier.invalidate(empty.index(i))
        mbarrier.init(full.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
    for i in gl.static_range(_SYNC):
        if AGAIN:
            mbarrier.invalidate(sync.index(i))
        mbarrier.init(sync.index(i), count=2)
    fence_async_shared()  # the barriers' init before any partition uses them


@gluon.jit
def _pass(q_smem, k_smem, valid_smem, p_smem, max_smem, lsum_smem, qexp_smem, full, empty, sync, start, end, q_row,
          stride_qh, pid_h, H, sm_scale_log2, cache_u8, stride_page, block_size, num_tokens, idx_row, part_out_ptr,
          part_lse_ptr, slot0, s_total, pid_q, S_Q, sink_ptr, stride_sink, D_NOPE: gl.constexpr,
          D_ROPE: gl.constexpr, TILE: gl.constexpr, DATA_BYTES: gl.constexpr, SCALE_BYTES: gl.constexpr,
          BLOCK_H: gl.constexpr, BLOCK_T: gl.constexpr, BS_SHIFT: gl.constexpr, NUM_BUFS: gl.constexpr,
          CONSUMER_REGS: gl.constexpr, F16: gl.constexpr, LEAVE_OUT: gl.constexpr, HAS_SINK: gl.constexpr,
          DIRECT: gl.constexpr):
    """One pass over the split in the three partitions (F16: the f16 pass, which also signals the combine's
    launch; else the bf16 rerun). The producer is the default partition: it gets the registers the consumers
    leave and carries the kernel's own values across the pass, so the consumers have CONSUMER_REGS for their
    loops alone."""
    D: gl.constexpr = D_NOPE + D_ROPE
    return gl.warp_specialize([
        (produce_k_tiles_in_halves, (k_smem, valid_smem, full, empty, cache_u8, stride_page, block_size, num_tokens,
                                     idx_row, start, end, D_NOPE, D_ROPE, TILE, DATA_BYTES, SCALE_BYTES, BLOCK_T,
                                     BS_SHIFT, NUM_BUFS, F16, LEAVE_OUT, True)),
        (_consumer, (q_smem, k_smem, valid_smem, p_smem, max_smem, lsum_smem, qexp_smem, full, empty, sync, start,
                     end, q_row, stride_qh, pid_h, H, sm_scale_log2, part_out_ptr, part_lse_ptr, slot0, s_total,
                     pid_q, S_Q, sink_ptr, stride_sink, BLOCK_H, BLOCK_T, D, NUM_BUFS, F16, LEAVE_OUT, 0, HAS_SINK,
                     DIRECT)),
        (_consumer, (q_smem, k_smem, valid_smem, p_smem, max_smem, lsum_smem, qexp_smem, full, empty, sync, start,
                     end, q_row, stride_qh, pid_h, H, sm_scale_log2, part_out_ptr, part_lse_ptr, slot0, s_total,
                     pid_q, S_Q, sink_ptr, stride_sink, BLOCK_H, BLOCK_T, D, NUM_BUFS, F16, LEAVE_OUT, 1, HAS_SINK,
                     DIRECT)),
    ], [4, 4], [CONSUMER_REGS, CONSUMER_REGS])


@gluon.jit
def _consumer(q_smem, k_smem, valid_smem, p_smem, max_smem, lsum_smem, qexp_smem, full, empty, sync, start, end,
              q_row, stride_qh, pid_h, H, sm_scale_log2, part_out_ptr, part_lse_ptr, slot0, s_total, pid_q, S_Q,
              sink_ptr, stride_sink, BLOCK_H: gl.constexpr, BLOCK_T: gl.constexpr, D: gl.constexpr,
              NUM_BUFS: gl.constexpr, F16: gl.constexpr, LEAVE_OUT: gl.constexpr, WG: gl.constexpr,
              HAS_SINK: gl.constexpr, DIRECT: gl.constexpr):
    """Consumer warpgroup WG (0 or 1): half of q into q_smem, then per full slot the scores of its half of the
    tokens, the swapped maxima, its P, and O[:, WG*D/2 :] += P V over the whole tile; then its half of the split's
    normalised output into the partial buffer (and, the first, the split's LSE); both row sums stay in lsum_smem
    for the kernel's check."""
    KT: gl.constexpr = gl.float16 if F16 else gl.bfloat16
    DH: gl.constexpr = D // 2
    HT: gl.constexpr = BLOCK_T // 2
    SL: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                 instr_shape=[16, HT, 16])  # S_w [BLOCK_H, HT]
    OL: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                 instr_shape=[16, DH, 16])  # O_w [BLOCK_H, DH]
    ROW: gl.constexpr = gl.SliceLayout(1, SL)
    swap = sync.index(0)
    p_ready = sync.index(1)
    q_ready = sync.index(2)
    done = sync.index(3)
    # q 16 heads at a time (all at once are 256 fp32 a thread while scaled), half the chunks each
    QC: gl.constexpr = 16
    QL: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [4, 1], [1, 0])  # [QC, D] bf16
    for c in gl.static_range(WG * BLOCK_H // QC // 2, (WG + 1) * BLOCK_H // QC // 2):
        q = load_q(q_row, stride_qh, pid_h * (BLOCK_H // QC) + c, H, QC, D, QL)
        if F16:
            q, q_exp = scale_q_per_head(q)
            qexp_smem.slice(c * QC, QC).store(q_exp)
        q_smem.index(0).slice(c * QC, QC).store(q.to(KT))
    fence_async_shared()  # q before either warpgroup's first wgmma reads it
    gl.thread_barrier()
    mbarrier.arrive(q_ready)
    mbarrier.wait(q_ready, 0)
    if F16:
        q_exp = qexp_smem.load(ROW)
    else:
        q_exp = gl.zeros([BLOCK_H], gl.int32, layout=ROW)
    scale = qk_scale(sm_scale_log2, q_exp, F16)
    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=ROW)
    l_i = gl.zeros([BLOCK_H], gl.float32, layout=ROW)
    # the zeros pass through a wgmma wait before the loop: otherwise LLVM copies them on the zero-trip edge into
    # a block between the loop's PV wgmma and the final wait, and ptxas then serialises every wgmma (C7515,
    # 144 WARPGROUP.DEPBAR in the lab; 12 with this)
    acc = warpgroup_mma_init(warpgroup_mma_wait(num_outstanding=0, deps=(
        warpgroup_mma_init(gl.zeros([BLOCK_H, DH], gl.float32, layout=OL)),)))
    s_zero = gl.zeros([BLOCK_H, HT], gl.float32, layout=SL)
    i = 0
    for t0 in range(start, end, BLOCK_T):
        buf = i % NUM_BUFS
        par = (i % 2) * 2
        mbarrier.wait(full.index(buf), (i // NUM_BUFS) & 1)
        k_own = k_smem.index(2 * buf + WG)       # [HT, D]: this warpgroup's tokens of the tile
        k_other = k_smem.index(2 * buf + 1 - WG)
        if LEAVE_OUT & 8:  # no QK MMA: constant scores; the last PV is still retired here
            s = s_zero + 1.0
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        else:
            # q's view through an index the compiler cannot fold: its 32 per-K-step descriptors are then rebuilt
            # each tile by uniform adds, not hoisted out of the loop into 64 registers (which spilled, lab)
            q_view = q_smem.index(gl.inline_asm_elementwise("mov.u32 $0, 0;", "=r", [], dtype=gl.int32,
                                                            is_pure=False, pack=1))
            s = warpgroup_mma(q_view, k_own.permute((1, 0)), s_zero, use_acc=False, is_async=True)
            s, acc = warpgroup_mma_wait(num_outstanding=0, deps=(s, acc))  # also retires the last PV
        v = valid_smem.index(buf).slice(WG * HT, HT).load(gl.SliceLayout(0, SL)) != 0
        if LEAVE_OUT & 4:  # no softmax: the scores as P, no rescaling, no swap
            p = s
            alpha = gl.full_like(m_i, 1.0)
        else:
            if F16:  # an f16 inf in K: NaN, not a dropped token (gluon_common._online_softmax)
                s = gl.where(s == float("-inf"), float("nan"), s)
            s = gl.where(gl.expand_dims(v, 0), s * gl.expand_dims(scale, 1), float("-inf"))
            max_smem.index(par + WG).store(gl.max(s, 1))
            gl.thread_barrier()
            mbarrier.arrive(swap)
            mbarrier.wait(swap, i & 1)
            m_new = gl.maximum(gl.maximum(m_i, max_smem.index(par).load(ROW)), max_smem.index(par + 1).load(ROW))
            m_use = gl.where(m_new == float("-inf"), 0.0, m_new)  # no (-inf) - (-inf)
            alpha = gl.exp2(m_i - m_use)
            p = gl.exp2(s - gl.expand_dims(m_use, 1))
            m_i = m_new
        l_i = l_i * alpha + gl.sum(p, 1)
        p_smem.index(par + WG).store(p.to(KT))
        fence_async_shared()  # P before either warpgroup's wgmma reads it
        gl.thread_barrier()   # every warp's P and retired PV before the arrives
        mbarrier.arrive(p_ready)
        mbarrier.arrive(empty.index((i + NUM_BUFS - 1) % NUM_BUFS), pred=i > 0)
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, OL)), 1)
        mbarrier.wait(p_ready, i & 1)
        if LEAVE_OUT & 16:  # no PV MMA: the accumulator keeps its rescaled zeros
            acc = warpgroup_mma_init(acc)
        else:
            acc = warpgroup_mma(p_smem.index(par + WG), k_own.slice(WG * DH, DH, dim=1), acc, is_async=True)
            acc = warpgroup_mma(p_smem.index(par + 1 - WG), k_other.slice(WG * DH, DH, dim=1), acc, is_async=True)
        i += 1
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    if F16 and WG == 0:  # the combine's launch overlaps the epilogue (and a bf16 pass, if one follows)
        launch_dependents()
    lsum_smem.index(WG).store(l_i)
    gl.thread_barrier()
    mbarrier.arrive(done)
    mbarrier.wait(done, 0)
    l_i = lsum_smem.index(0).load(ROW) + lsum_smem.index(1).load(ROW)
    # F16: a non-finite row sum makes this half non-finite too, and the bf16 pass writes it again
    store_half(acc, m_i, l_i, F16_OUT_MULT if F16 else 1.0, part_out_ptr, slot0, pid_h, H, s_total, sink_ptr,
               stride_sink, BLOCK_H, D, WG, HAS_SINK, DIRECT)
    if WG == 0:  # the split's LSE
        live, lse2 = split_lse2(m_i, l_i)
        heads = pid_h * BLOCK_H + gl.arange(0, BLOCK_H, layout=ROW)
        store_lse(lse2, live, pid_q, heads, H, S_Q, part_lse_ptr, slot0 + heads * s_total, sink_ptr, stride_sink,
                  HAS_SINK, DIRECT)


def default_config(heads: int, allowed: dict = ALLOWED) -> TiledConfig:
    """64 heads a program (more heads: more programs, each gathering the same tokens)."""
    return TiledConfig(BLOCK_H=64, BLOCK_T=64, num_warps=4)


def launch_ws_bal_partial(*, q, cache, indices, topk_length, part_out, part_lse, split_offset, num_splits,
                          tokens_per_split, sm_scale, name, allowed=ALLOWED, config=None, maxnreg=MAXNREG,
                          switches=SWITCHES, LEAVE_OUT=0, direct=False, attn_sink=None):
    """Run the balanced three-partition partial kernel for one KV scope into splits
    [split_offset, split_offset+num_splits) (direct: part_out and part_lse are the call's out and lse, see
    gluon_common.epilogue_args).

    name, allowed: the registered rung's name and config table; switches: its constexprs (SWITCHES); LEAVE_OUT:
    stages to drop, for a measurement (workbench.bench.isolate)."""
    require_sm90(q, name)
    b, s_q, h, _ = q.shape
    cfg = default_config(h, allowed) if config is None else TiledConfig.from_any(config, allowed, name)
    args = split_args(q=q, cache=cache, indices=indices, topk_length=topk_length, part_out=part_out,
                      part_lse=part_lse, split_offset=split_offset, tokens_per_split=tokens_per_split,
                      sm_scale=sm_scale)
    args.update(epilogue_args(part_lse=part_lse, direct=direct, attn_sink=attn_sink, num_splits=num_splits))
    grid = (cdiv(h, cfg.BLOCK_H), num_splits, b * s_q)
    launch(ws_bal_partial_kernel, grid, dict(**args, **cache_constexprs(cache), BLOCK_H=cfg.BLOCK_H,
                                             BLOCK_T=cfg.BLOCK_T, num_warps=cfg.num_warps, maxnreg=maxnreg,
                                             LEAVE_OUT=LEAVE_OUT, **switches))
