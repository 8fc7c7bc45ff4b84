"""Ladder rung "wgmma_ws": the f16 Gluon kernel warp-specialised, a producer partition and a consumer partition.

The kernel of ``wgmma`` runs one instruction stream per warp (gather, dequantise, store K, QK, softmax, store
P, PV, with CTA barriers between them), so a warp waiting on its tile's bytes holds up the MMAs and the MMAs hold
up the next gathers. What showed it, what this rung was predicted to move and what it moved: docs/decisions.md.

Here (FlashMLA's SM90 schedule, written in Gluon) the block's warps split into two partitions that meet only at
mbarriers around a ring of NUM_BUFS K tiles in shared memory:

- the producer (a worker partition of PRODUCER_WARPS warps) gathers a tile's bytes with 16-byte loads, 4 lanes a
  token, the next tile's loads in flight while it waits for a free slot, dequantises them (f16, or bf16 in the
  rerun: gluon_common's dequants) into the slot with the rope in the last group's words, writes the tile's valid
  mask beside it, and signals the slot full;
- the consumer (the default partition: the kernel's num_warps, one warpgroup at 16 heads) waits for a full slot,
  runs QK (S^T = K q^T, tokens as M), the online softmax and the PV wgmma (O^T += K^T P^T), and hands the slot
  back once the wgmma that read it has retired. S^T puts a tile's 64 tokens across the 4 warps, so a head's maximum
  over them crosses warps: each warp takes its 16 tokens' maxima and the four meet in a 256-byte buffer across one
  partition barrier; the row sums stay each thread's own until the loop ends (4 partition barriers a tile, not
  the 8 of gl.max and gl.sum: docs/decisions.md, "Rung 13's row sums").

K, q and P are f16, as in wgmma_f16: a split with a valid token outside the f16 window comes out non-finite and
runs again with bf16 operands in the same two partitions (gluon_common.F16_MIN_SCALE_BYTE), so every cache is
exact. After its main loop the consumer signals griddepcontrol.launch_dependents, so a combine launched as a
programmatic dependent starts while the epilogue runs (decode.combine_pdl).

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
                           produce_k_tiles, qk_scale, require_sm90, scale_q_per_head, softmax_step, store_partial)

# 16 heads with one consumer warpgroup. (64 heads in two consumer warpgroups spilled and ran 1.8-3x slower than
# wgmma_f16: data/explore/explore_h200_20261202-1309_ws64.csv; the 64-head kernel is wgmma_ws_h64's three partitions)
ALLOWED = dict(BLOCK_H=(16,), BLOCK_T=(64,), num_warps=(4,), num_stages=(1,))
CONFIG_SPACE = [TiledConfig(BLOCK_H=16, BLOCK_T=64, num_warps=4)]


def estimate_shared_bytes(c: TiledConfig, NUM_BUFS: int = 3, PRODUCER_WARPS: int = 8, PRODUCER_REGS: int = 152,
                          LEAVE_OUT: int = 0) -> int:
    """Shared bytes of one block, as the compiler allocates them (sm_90 lab, 215,808 B at 16 heads): NUM_BUFS 16-bit
    K tiles (1 KB/token each) with their valid bytes and two mbarriers each, q (1 KB/head), P (2 B/token/head),
    the four consumer warps' tile maxima (16 B/head) and the row sums' one cross-warp reduction after the loop
    (16 B/head), rounded up to 128 B; the epilogue's transposed accumulator reuses freed space. The other switches
    move no shared bytes; they are named so that a misspelled switch is a TypeError."""
    t, h = c.BLOCK_T, c.BLOCK_H
    total = NUM_BUFS * (1024 * t + t + 16) + 1024 * h + 2 * t * h + 32 * h
    return -(-total // 128) * 128


@gluon.jit
def ws_partial_kernel(
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
    NUM_BUFS: gl.constexpr,            # K tiles in the ring: the producer runs up to NUM_BUFS tiles ahead
    PRODUCER_WARPS: gl.constexpr,      # warps of the producer partition (gathers and dequant)
    PRODUCER_REGS: gl.constexpr,       # its registers per thread (setmaxnreg); the consumer gets the rest
    LEAVE_OUT: gl.constexpr = 0,       # measurement only: gluon_common.LEAVE_OUT_BITS; wrong output
    HAS_SINK: gl.constexpr = False,
    DIRECT: gl.constexpr = False,      # one split in all: write out and lse as the combine would (epilogue_args)
):
    KT: gl.constexpr = gl.float16  # the MMA operands' type: K, q, P (bf16 in the rerun)
    D: gl.constexpr = D_NOPE + D_ROPE
    K_SMEM: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16)
    Q_SMEM: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, D], KT)
    P_SMEM: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_T, BLOCK_H], KT)
    V_SMEM: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])  # per slot; the ring index leads

    pid_h = gl.program_id(0)
    split = gl.program_id(1)
    pid_q = gl.program_id(2)
    bi = pid_q // S_Q
    si = pid_q % S_Q

    q_smem = gl.allocate_shared_memory(KT, [BLOCK_H, D], Q_SMEM)  # written by the consumer
    k_smem = gl.allocate_shared_memory(KT, [NUM_BUFS, BLOCK_T, D], K_SMEM)
    valid_smem = gl.allocate_shared_memory(gl.int8, [NUM_BUFS, BLOCK_T], V_SMEM)
    p_smem = gl.allocate_shared_memory(KT, [BLOCK_T, BLOCK_H], P_SMEM)
    max_smem = gl.allocate_shared_memory(gl.float32, [4 * BLOCK_H], V_SMEM)  # [consumer warp, head] tile maxima
    full = gl.allocate_shared_memory(gl.int64, [NUM_BUFS, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_BUFS, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_BUFS):
        mbarrier.init(full.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    fence_async_shared()  # the barriers' init before either partition uses them

    end_all = TOPK
    if HAS_TOPK_LEN:
        end_all = gl.minimum(gl.load(topk_len_ptr + bi * stride_tl), TOPK)
    start = split * tokens_per_split
    end = gl.minimum(start + tokens_per_split, end_all)
    idx_row = idx_ptr + bi * stride_ib + si * stride_is

    q_row = q_ptr + bi * stride_qb + si * stride_qs
    m_i, l_i, acc = _pass(q_smem, k_smem, valid_smem, p_smem, max_smem, full, empty, start, end, q_row, stride_qh,
                          pid_h, H, sm_scale_log2, cache_u8, stride_page, block_size, num_tokens, idx_row, D_NOPE,
                          D_ROPE, TILE, DATA_BYTES, SCALE_BYTES, BLOCK_H, BLOCK_T, BS_SHIFT, NUM_BUFS, PRODUCER_WARPS,
                          PRODUCER_REGS, 1, LEAVE_OUT)
    bad = not_finite(l_i)  # a token outside the f16 window makes some row sum non-finite
    out_mult = gl.where(bad, 1.0, F16_OUT_MULT)
    if bad:  # rare: the split again with bf16 operands (the bf16 dequant, unscaled q) in the same two partitions.
        # A rerun by the consumer warps alone (wgmma's non-specialised loop) cost 4-7% at h16 though it never ran:
        # its code changed how ptxas scheduled the fast loop (same-run A/B, H200)
        for i in gl.static_range(NUM_BUFS):
            mbarrier.invalidate(full.index(i))
            mbarrier.invalidate(empty.index(i))
            mbarrier.init(full.index(i), count=1)
            mbarrier.init(empty.index(i), count=1)
        fence_async_shared()
        m_i, l_i, acc = _pass(q_smem._reinterpret(gl.bfloat16, [BLOCK_H, D], Q_SMEM),
                              k_smem._reinterpret(gl.bfloat16, [NUM_BUFS, BLOCK_T, D], K_SMEM), valid_smem,
                              p_smem._reinterpret(gl.bfloat16, [BLOCK_T, BLOCK_H], P_SMEM), max_smem, full, empty,
                              start, end,
                              q_row, stride_qh, pid_h, H, sm_scale_log2, cache_u8, stride_page, block_size,
                              num_tokens, idx_row, D_NOPE, D_ROPE, TILE, DATA_BYTES, SCALE_BYTES, BLOCK_H, BLOCK_T,
                              BS_SHIFT, NUM_BUFS, PRODUCER_WARPS, PRODUCER_REGS, 0, LEAVE_OUT)
    store_partial(m_i, l_i, acc, out_mult, part_out_ptr, part_lse_ptr, pid_q, pid_h, split, split_offset, s_total,
                  H, S_Q, sink_ptr, stride_sink, BLOCK_H, D, HAS_SINK, DIRECT)


@gluon.jit
def _pass(q_smem, k_smem, valid_smem, p_smem, max_smem, full, empty, start, end, q_row, stride_qh, pid_h, H,
          sm_scale_log2, cache_u8, stride_page, block_size, num_tokens, idx_row, D_NOPE: gl.constexpr,
          D_ROPE: gl.constexpr, TILE: gl.constexpr, DATA_BYTES: gl.constexpr, SCALE_BYTES: gl.constexpr,
          BLOCK_H: gl.constexpr, BLOCK_T: gl.constexpr, BS_SHIFT: gl.constexpr, NUM_BUFS: gl.constexpr,
          PRODUCER_WARPS: gl.constexpr, PRODUCER_REGS: gl.constexpr, F16: gl.constexpr, LEAVE_OUT: gl.constexpr):
    """One pass over the split in the two partitions (F16: the f16 pass, which also signals the combine's launch;
    else the bf16 rerun, over the same buffers viewed as bf16); returns the consumer's (m_i, l_i, O^T)."""
    return gl.warp_specialize([
        (_consumer, (q_smem, k_smem, valid_smem, p_smem, max_smem, full, empty, start, end, q_row, stride_qh, pid_h, H,
                     sm_scale_log2, BLOCK_H, BLOCK_T, D_NOPE + D_ROPE, NUM_BUFS, F16, F16, LEAVE_OUT)),
        (produce_k_tiles, (k_smem, valid_smem, full, empty, cache_u8, stride_page, block_size, num_tokens, idx_row,
                           start, end, D_NOPE, D_ROPE, TILE, DATA_BYTES, SCALE_BYTES, BLOCK_T, BS_SHIFT, NUM_BUFS, F16,
                           LEAVE_OUT)),
    ], [PRODUCER_WARPS], [PRODUCER_REGS])


@gluon.jit
def _consumer(q_smem, k_smem, valid_smem, p_smem, max_smem, full, empty, start, end, q_row, stride_qh, pid_h, H,
              sm_scale_log2, BLOCK_H: gl.constexpr, BLOCK_T: gl.constexpr, D: gl.constexpr, NUM_BUFS: gl.constexpr,
              F16: gl.constexpr, LAUNCH_DEPENDENTS: gl.constexpr, LEAVE_OUT: gl.constexpr):
    """q into q_smem (with F16, each head's largest |q| scaled into [2**14, 2**15), the scores scaled back), then
    QK, softmax and PV over the full slots, in order; returns (m_i, l_i, O^T [D, BLOCK_H] fp32). q is the
    consumer's own work, so the producer's first gathers start with the block. LAUNCH_DEPENDENTS (the first
    pass): signal the combine's launch once the main loop is done."""
    KT: gl.constexpr = gl.float16 if F16 else gl.bfloat16
    QL: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [4, 1], [1, 0])  # [BLOCK_H, D] bf16
    q = load_q(q_row, stride_qh, pid_h, H, BLOCK_H, D, QL)
    if F16:
        q, q_exp = scale_q_per_head(q)
    else:
        q_exp = gl.zeros([BLOCK_H], gl.int32, layout=gl.SliceLayout(1, QL))
    q_smem.store(q.to(KT))
    fence_async_shared()  # q before the consumer's first wgmma reads it, from every consumer warp
    gl.thread_barrier()
    SL: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                 instr_shape=[16, BLOCK_H, 16])  # S^T [BLOCK_T, BLOCK_H]
    OL: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                 instr_shape=[16, BLOCK_H, 16])  # O^T [D, BLOCK_H]
    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=gl.SliceLayout(0, SL))
    # the zeros pass through a wgmma wait before the loop: otherwise ptxas serialises every wgmma of the kernel
    # (C7515 on the loop's zero-trip edge, as in wgmma_ws_bal; 128 WARPGROUP.DEPBAR in the lab without it, 8 with)
    acc = warpgroup_mma_init(warpgroup_mma_wait(num_outstanding=0, deps=(
        warpgroup_mma_init(gl.zeros([D, BLOCK_H], gl.float32, layout=OL)),)))
    s_zero = gl.zeros([BLOCK_T, BLOCK_H], gl.float32, layout=SL)
    l_t = gl.zeros([BLOCK_T, BLOCK_H], gl.float32, layout=SL)  # each thread's share of the row sums
    scale = gl.convert_layout(qk_scale(sm_scale_log2, q_exp, F16), gl.SliceLayout(0, SL))
    i = 0
    for t0 in range(start, end, BLOCK_T):
        buf = i % NUM_BUFS
        # the previous slot goes back once the last PV has retired in every warp, before this tile's wait and QK,
        # not after the softmax (wgmma_ws_h64 says why, and why not between QK's issue and its wait)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        gl.thread_barrier()
        mbarrier.arrive(empty.index((i + NUM_BUFS - 1) % NUM_BUFS), pred=i > 0)
        mbarrier.wait(full.index(buf), (i // NUM_BUFS) & 1)
        kb = k_smem.index(buf)
        # the valid bytes are read while QK runs: read after its wait, their shared loads were a tenth of this
        # partition's stall samples (ncu source counters at b64 h16, docs/decisions.md)
        v = valid_smem.index(buf).load(gl.SliceLayout(1, SL)) != 0
        if LEAVE_OUT & 8:  # no QK MMA: constant scores
            s = s_zero + 1.0
        else:
            s = warpgroup_mma(kb, q_smem.permute((1, 0)), s_zero, use_acc=False, is_async=True)  # [BLOCK_T, BLOCK_H]
            s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
        if LEAVE_OUT & 4:
            p, alpha, m_i = softmax_step(s, v, m_i, scale, F16, 1)
        else:
            p, alpha, m_i = _softmax_step_by_warps(s, v, m_i, scale, max_smem, F16, BLOCK_T, BLOCK_H)
        l_t = l_t * gl.expand_dims(alpha, 0) + p
        # every consumer warp has retired the last PV (it read P) before the loop's first barrier, so P may be
        # overwritten
        p_smem.store(p.to(KT))
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(0, OL)), 0)
        fence_async_shared()
        gl.thread_barrier()  # every warp's P before the PV reads it
        if LEAVE_OUT & 16:  # no PV MMA: the accumulator keeps its rescaled zeros (as the loop carries it)
            acc = warpgroup_mma_init(acc)
        else:
            acc = warpgroup_mma(kb.permute((1, 0)), p_smem, acc, is_async=True)  # O^T += K^T P^T
        i += 1
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    l_i = gl.sum(l_t, 0)
    if LAUNCH_DEPENDENTS:  # the combine's launch overlaps the epilogue (and a bf16 pass, if one follows)
        launch_dependents()
    return m_i, l_i, acc


@gluon.jit
def _softmax_step_by_warps(s, v, m_i, scale, max_smem, INF_TO_NAN: gl.constexpr, BLOCK_T: gl.constexpr,
                           BLOCK_H: gl.constexpr):
    """gluon_common._online_softmax of S^T [BLOCK_T, BLOCK_H] in the wgmma layout of 4 warps (each warp a quarter
    of the tokens), with the tile's maxima taken by each warp over its own tokens and met in max_smem [4 * BLOCK_H]
    across one partition barrier. No barrier guards the buffer's reuse: every warp reads it before the tile's P
    barrier, and the next tile's stores come after that barrier. The reshape puts each warp's tokens in one row
    (ALLOWED fixes the consumer at 4 warps and BLOCK_T at 64; another mapping would stay exact, only slower). The
    same step as gluon_common._online_softmax but for where the maxima meet: a fix to one belongs in both."""
    SL: gl.constexpr = s.type.layout
    if INF_TO_NAN:  # as _online_softmax: an f16 inf in K makes the row sums NaN (the bf16 pass), not a dropped token
        s = gl.where(s == float("-inf"), float("nan"), s)
    s = gl.where(gl.expand_dims(v, 1), s * gl.expand_dims(scale, 0), float("-inf"))
    warp_max = gl.max(gl.reshape(s, [4, BLOCK_T // 4, BLOCK_H]), 1)  # [4, BLOCK_H]: shuffles within each warp
    max_smem._reinterpret(gl.float32, [4, BLOCK_H], gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0])).store(warp_max)
    gl.thread_barrier()
    RL: gl.constexpr = gl.SliceLayout(0, SL)
    t = gl.maximum(gl.maximum(max_smem.slice(0, BLOCK_H).load(RL), max_smem.slice(BLOCK_H, BLOCK_H).load(RL)),
                   gl.maximum(max_smem.slice(2 * BLOCK_H, BLOCK_H).load(RL),
                              max_smem.slice(3 * BLOCK_H, BLOCK_H).load(RL)))
    m_new = gl.maximum(m_i, t)
    m_use = gl.where(m_new == float("-inf"), 0.0, m_new)  # no (-inf) - (-inf)
    alpha = gl.exp2(m_i - m_use)
    p = gl.exp2(s - gl.expand_dims(m_use, 0))
    return p, alpha, m_new


def default_config(heads: int, allowed: dict = ALLOWED) -> TiledConfig:
    """16 heads a program (more heads: more programs, each gathering the same tokens), one consumer warpgroup."""
    return TiledConfig(BLOCK_H=16, BLOCK_T=64, num_warps=4)


def launch_ws_partial(*, q, cache, indices, topk_length, part_out, part_lse, split_offset, num_splits,
                      tokens_per_split, sm_scale, name, allowed=ALLOWED, config=None, maxnreg=None, direct=False,
                      attn_sink=None, **switches):
    """Run the warp-specialised partial kernel for one KV scope into splits [split_offset, split_offset+num_splits)
    (direct: part_out and part_lse are the call's out and lse, see gluon_common.epilogue_args).

    name, allowed: the registered rung's name and config table; switches: its constexprs (NUM_BUFS, PRODUCER_WARPS,
    PRODUCER_REGS; LEAVE_OUT for a measurement); maxnreg: the block's register cap per thread (None:
    :func:`register_cap`), from which the producer gets PRODUCER_REGS and the consumer the rest.
    """
    require_sm90(q, name)
    b, s_q, h, _ = q.shape
    cfg = default_config(h, allowed) if config is None else TiledConfig.from_any(config, allowed, name)
    args = split_args(q=q, cache=cache, indices=indices, topk_length=topk_length, part_out=part_out,
                      part_lse=part_lse, split_offset=split_offset, tokens_per_split=tokens_per_split,
                      sm_scale=sm_scale)
    args.update(epilogue_args(part_lse=part_lse, direct=direct, attn_sink=attn_sink, num_splits=num_splits))
    grid = (cdiv(h, cfg.BLOCK_H), num_splits, b * s_q)
    launch(ws_partial_kernel, grid, dict(**args, **cache_constexprs(cache), BLOCK_H=cfg.BLOCK_H, BLOCK_T=cfg.BLOCK_T,
                                         num_warps=cfg.num_warps,
                                         maxnreg=maxnreg or register_cap(cfg.num_warps, switches["PRODUCER_WARPS"]),
                                         **switches))


def register_cap(consumer_warps: int, producer_warps: int) -> int:
    """maxnreg for one block per SM: 65536 registers over all its threads, rounded down to a multiple of 8."""
    return min(255, 65536 // (32 * (consumer_warps + producer_warps))) // 8 * 8
