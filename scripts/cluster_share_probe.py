"""Producer-only probe: does sharing each 64-token tile's gather + dequant between the 2 CTAs of a cluster halve
the producer's time at 128 heads?

Two variants of one Gluon kernel (``probe_kernel``), both on grid 2*Q (Q queries x 2 head groups; no MMA, no
softmax: the "consumer" is the same warps reading the slot back after an mbarrier handshake):

- A, ``local`` (today's wgmma_ws_h64 producer): every CTA gathers its query's selected tokens (int32 indices into
  the paged MODEL1 cache, 64-token tiles, the next tile's loads in flight) and dequantises all 64 tokens of each
  tile into a bf16 slot of its own shared memory (ring of NUM_BUFS slots, 128-byte swizzle), then arrives on and
  waits for the slot's ``full`` mbarrier and reads the slot.
- B, ``shared`` (FlashMLA's split): the same grid launched as clusters of 2 (CTAs 2q and 2q+1, the two head groups
  of query q). Each CTA gathers and dequantises only its half (32 tokens, rank r: rows 32r..32r+31) of each tile,
  stores it into its own slot (the kernel's ordinary swizzled shared stores) and, with
  ``st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32`` (SASS STAS.128), into the peer's slot at the same
  swizzled offsets, completing bytes on the peer's ``full`` mbarrier (``mapa.shared::cluster`` gives the peer's
  addresses). Each CTA's ``full`` expects the peer's 32 KB (``mbarrier.arrive.expect_tx``, its own one arrival);
  ``empty`` (count 2) takes a local arrive and a remote one (``mbarrier.arrive.release.cluster.shared::cluster``)
  from the peer's consumer, and the producer waits on it before it writes a slot in either CTA. Start: barrier
  init, ``fence.mbarrier_init``, ``barrier.cluster``; end: a "done" mbarrier handshake, so that no CTA exits while
  the peer may still write into it.

Two more local variants ask why the producer takes its time (the shared variant took 1.08-1.15x local's on the
H200, data/explore/explore_h200_20261205-1806_cluster_share.csv): ``local_w8`` spreads the same tile over 8 warps
(half the dequant a thread, the same bytes in flight), ``local_w8_ahead2`` also keeps a second tile's loads in flight
(tile i+2's issued before tile i is dequantised, in the registers the 8 warps free). A producer bound by its own
instructions' latency gets faster with the first; one bound by the loads' latency only with the second.

``shared_bulk`` asks whether the shared split pays once its remote stores leave the threads: as ``shared``, but each
CTA stores its dequantised half only into its own slot (the ordinary swizzled stores), fences them to the async
proxy, and thread 0 copies the half to the same offsets of the peer's slot with 8 bulk copies
(``cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes``, SASS UBLKCP: the TMA unit moves the
bytes), 4 KB each (rows 32r..32r+31 of one 64-column block), completing on the peer's ``full`` mbarrier. The local
slot is read by the copy until its bytes land in the peer, which the peer's release of that slot (on our ``empty``)
follows, so the producer's wait on ``empty`` before it writes the slot again covers the copy.

The gathers and the dequant are the workbench's own (``workbench.kernels.gluon_common``: ``load_idx``,
``load_tile``, ``dequant_tile`` in bf16, ``store_tile_rows``), on a real MODEL1 cache
(``workbench.format.codec.quantize_kv``); nothing under workbench/ is changed. Not modelled: the valid-mask slot,
the consumers' wgmma reads (a CHECK launch reads the whole slot; a timed one reads one word a thread a tile), the
f16 pass, splits (each CTA walks all topk tokens, one split, as at b64 h128), and warp specialisation: in both
variants the CTA's 4 warps (the size of wgmma_ws_h64's producer) gather, dequantise, store and then play the
consumer in turn, one CTA an SM (131 KB of shared memory), so a timing is the producer's chain alone.

How the cluster launch is made (Triton 3.6): the kernel is compiled as an ordinary 1-CTA Gluon kernel
(``num_ctas=1``: no CGA layouts needed) and launched through its own launcher with packed metadata
``(num_warps, 2, shared)``: the launcher then sets ``gridDim.x = 2 * grid_x`` and
``CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = (2, 1, 1)`` (triton/backends/nvidia/driver.py, ``_launch``), so CTAs 2q and
2q+1 share a cluster and ``program_id(0)`` is still ``ctaid.x``. The cluster rank comes from ``%cluster_ctarank``.
Gluon gives no address of a shared allocation, so the kernel takes the byte offsets of its two allocations inside
``global_smem`` as arguments, read from the compiled module by running Triton's own shared-memory allocation
pass on its TTGIR (:func:`smem_offsets`).

Usage:
  python scripts/cluster_share_probe.py --compile-only     # CPU: compile both for sm_90a, print the lab numbers
  python scripts/cluster_share_probe.py --check --time     # GPU (sm_90): check both against torch, then time
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import torch  # noqa: E402
import triton  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier  # noqa: E402

from workbench.format.layout import MODEL1  # noqa: E402
from workbench.kernels.gluon_common import (_rows_layout, _tile_layouts, dequant_tile, load_idx,  # noqa: E402
                                            load_tile, store_tile_rows)

BLOCK_T = 64
NUM_BUFS = 2
NUM_WARPS = 4
D = MODEL1.d
SHAPES = ((64, 128, 2048, 256), (64, 128, 512, 256), (16, 128, 2048, 64), (128, 128, 2048, 256))  # b, h, topk, page


# ----------------------------------------------------------------------------- inline PTX stand-ins

@gluon.jit
def _smem_base():
    """The shared::cta address of Triton's dynamic shared memory (``global_smem``, offset 0 of every allocation)."""
    return gl.inline_asm_elementwise("mov.u32 $0, global_smem;", "=r", [], dtype=gl.int32, is_pure=True, pack=1)


@gluon.jit
def _cluster_rank():
    return gl.inline_asm_elementwise("mov.u32 $0, %cluster_ctarank;", "=r", [], dtype=gl.int32, is_pure=True,
                                     pack=1)


@gluon.jit
def _trap_unless_cluster_of_2():
    """A launch that is not a cluster of 2 stops here (a CUDA error), not in a mapa to a CTA that is not there."""
    gl.inline_asm_elementwise("""{
        .reg .pred p;
        .reg .u32 n;
        mov.u32 n, %cluster_nctarank;
        setp.ne.u32 p, n, 2;
        @p trap;
        mov.u32 $0, 0;
        }""", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _trap():
    gl.inline_asm_elementwise("trap;\nmov.u32 $0, 0;", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _mapa(addr, rank):
    """A shared::cta address -> the same offset in CTA ``rank`` of the cluster (shared::cluster address)."""
    return gl.inline_asm_elementwise("mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r", [addr, rank],
                                     dtype=gl.int32, is_pure=True, pack=1)


@gluon.jit
def _cluster_sync():
    """Every thread of both CTAs: barrier.cluster (release / acquire), after the barriers' init fence."""
    gl.inline_asm_elementwise("fence.mbarrier_init.release.cluster;\n"
                              "barrier.cluster.arrive.release.aligned;\n"
                              "barrier.cluster.wait.acquire.aligned;\n"
                              "mov.u32 $0, 0;", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _try_wait(addr, phase, CLUSTER_SCOPE: gl.constexpr):
    """One mbarrier.try_wait.parity on a local barrier address: 1 when the phase has completed. CLUSTER_SCOPE:
    acquire at cluster scope (ptxas adds an L1 invalidate, CCTL.IVALL, to every wait); else the default
    (acquire.cta), as CUTLASS's ClusterTransactionBarrier::wait and FlashMLA use for the peer's st.async bytes."""
    if CLUSTER_SCOPE:
        return gl.inline_asm_elementwise("""{
            .reg .pred p;
            mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [$1], $2;
            selp.u32 $0, 1, 0, p;
            }""", "=r,r,r", [addr, phase], dtype=gl.int32, is_pure=False, pack=1)
    else:
        return gl.inline_asm_elementwise("""{
            .reg .pred p;
            mbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2;
            selp.u32 $0, 1, 0, p;
            }""", "=r,r,r", [addr, phase], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _wait(addr, phase, CLUSTER_SCOPE: gl.constexpr):
    """Spin on try_wait; after 2**24 tries (seconds, where a healthy wait takes microseconds) trap, so that a
    protocol error ends the launch with a CUDA error instead of hanging the device call."""
    done = _try_wait(addr, phase, CLUSTER_SCOPE)
    tries = 0
    while done == 0:
        done = _try_wait(addr, phase, CLUSTER_SCOPE)
        tries += 1
        if tries > 16777216:
            _trap()


@gluon.jit
def _remote_arrive(raddr, CLUSTER_SCOPE: gl.constexpr):
    """Thread 0 arrives once on an mbarrier of the peer CTA (shared::cluster address): release at cluster scope
    with CLUSTER_SCOPE, else the default semantics (CUTLASS's ClusterBarrier::arrive(cta_id, pred))."""
    if CLUSTER_SCOPE:
        gl.inline_asm_elementwise("""{
            .reg .pred p;
            .reg .u32 t;
            mov.u32 t, %tid.x;
            setp.eq.u32 p, t, 0;
            @p mbarrier.arrive.release.cluster.shared::cluster.b64 _, [$1];
            mov.u32 $0, 0;
            }""", "=r,r", [raddr], dtype=gl.int32, is_pure=False, pack=1)
    else:
        gl.inline_asm_elementwise("""{
            .reg .pred p;
            .reg .u32 t;
            mov.u32 t, %tid.x;
            setp.eq.u32 p, t, 0;
            @p mbarrier.arrive.shared::cluster.b64 _, [$1];
            mov.u32 $0, 0;
            }""", "=r,r", [raddr], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _st_async(raddr, a, b, c, d, rbar):
    """16 bytes into the peer's shared memory, completing 16 bytes on the peer's mbarrier (SASS STAS.128)."""
    return gl.inline_asm_elementwise(
        "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [$1], {$2, $3, $4, $5}, [$6];\n"
        "mov.u32 $0, 0;", "=r,r,r,r,r,r,r", [raddr, a, b, c, d, rbar], dtype=gl.int32, is_pure=False, pack=1)


# one bulk copy (the TMA unit, not the threads' MIO) of 4 KB of our shared memory into the peer's, completing its
# bytes on the peer's mbarrier: 32 rows of one 64-column block of the 128-byte-swizzled slot (a block keeps all
# BLOCK_T rows together, row r at r * 128, so rows r0..r0+31 are 4 contiguous KB at the same offsets in both CTAs)
_BULK_ASM = gl.constexpr("""{
    .reg .pred p;
    .reg .u32 t;
    mov.u32 t, %tid.x;
    setp.eq.u32 p, t, 0;
    @p cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [$1], [$2], 4096, [$3];
    mov.u32 $0, 0;
    }""")


@gluon.jit
def _bulk_to_peer(src, dst, rbar, STRIDE: gl.constexpr, BLOCKS: gl.constexpr):
    """Thread 0 copies BLOCKS blocks of 4 KB (src + c * STRIDE, shared::cta) to dst + c * STRIDE (the peer's,
    shared::cluster), each completing its bytes on the peer's mbarrier rbar: the shared_bulk variant's half tile."""
    for c in gl.static_range(BLOCKS):
        gl.inline_asm_elementwise(_BULK_ASM, "=r,r,r,r", [dst + c * STRIDE, src + c * STRIDE, rbar],
                                  dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _ld_shared(addr):
    return gl.inline_asm_elementwise("ld.shared.u32 $0, [$1];", "=r,r", [addr], dtype=gl.int32, is_pure=False,
                                     pack=1)


# ----------------------------------------------------------------------------- the kernel

@gluon.jit
def _store_remote(lo, hi, slot_r, rbar, ROW0, HT: gl.constexpr, BLOCK_T: gl.constexpr, G: gl.constexpr):
    """(lo, hi) [HT, G, 16] int32 of rows ROW0.. (ROW0 a runtime value) into the peer's slot (shared::cluster
    address slot_r), at the offsets of the slot's NVMMA 128-byte swizzle: column block g (64 bf16 = 128 B) of all
    BLOCK_T rows is contiguous, row r at r * 128 in it, 16-byte chunk k at (k ^ (r % 8)) * 16. A chunk holds words
    2k and 2k+1 of lo and hi interleaved, as store_tile_rows' join(lo, hi)."""
    NW: gl.constexpr = gl.num_warps()
    LC: gl.constexpr = gl.BlockedLayout([1, 8, 2], [8, 1, 4], [NW, 1, 1], [2, 1, 0])  # [HT, G, 8 chunks]
    lo_e, lo_o = gl.split(gl.reshape(lo, [HT, G, 8, 2]))
    hi_e, hi_o = gl.split(gl.reshape(hi, [HT, G, 8, 2]))
    lo_e = gl.convert_layout(lo_e, LC)
    lo_o = gl.convert_layout(lo_o, LC)
    hi_e = gl.convert_layout(hi_e, LC)
    hi_o = gl.convert_layout(hi_o, LC)
    r = ROW0 + gl.arange(0, HT, layout=gl.SliceLayout(1, gl.SliceLayout(2, LC)))
    g = gl.arange(0, G, layout=gl.SliceLayout(0, gl.SliceLayout(2, LC)))
    k = gl.arange(0, 8, layout=gl.SliceLayout(0, gl.SliceLayout(1, LC)))
    r3 = gl.expand_dims(gl.expand_dims(r, 1), 2)
    g3 = gl.expand_dims(gl.expand_dims(g, 0), 2)
    k3 = gl.expand_dims(gl.expand_dims(k, 0), 1)
    addr = slot_r + g3 * (BLOCK_T * 128) + r3 * 128 + ((k3 ^ (r3 & 7)) * 16)
    _st_async(addr, lo_e, hi_e, lo_o, hi_o, addr * 0 + rbar)


@gluon.jit
def _read_back(ring, buf, slot_addr, t0, i, out_cta, orow, ocol, tid, chk, CHECK: gl.constexpr, BLOCK_T: gl.constexpr,
               D: gl.constexpr, SLOT: gl.constexpr, KW: gl.constexpr):
    """The trivial consumer: a CHECK launch writes the whole slot out, a timed one folds one word a thread a tile
    into ``chk`` (so the slot is read after its barrier, and nothing is optimised away)."""
    if CHECK:
        tile = ring.index(buf)._reinterpret(gl.int32, [BLOCK_T, D // 2], KW).load(orow.type.layout.parent)
        gl.store(out_cta + (t0 + gl.expand_dims(orow, 1)) * (D // 2) + gl.expand_dims(ocol, 0), tile)
    else:
        chk = chk ^ _ld_shared(slot_addr + ((tid * 16 + i * 4) % SLOT))
    return chk


@gluon.jit
def _consume_shared(ring, bars, bar_l, bar_r, ring_l, j, n_tiles, out_cta, orow, ocol, tid, chk, CHECK: gl.constexpr,
                    CLUSTER_SCOPE: gl.constexpr, BLOCK_T: gl.constexpr, D: gl.constexpr, SLOT: gl.constexpr,
                    KW: gl.constexpr, NUM_BUFS: gl.constexpr):
    """Tile j: wait until both halves are in our slot, read it back, and release the slot in both CTAs (the last
    NUM_BUFS releases are never waited for, so they are not sent)."""
    buf = j % NUM_BUFS
    _wait(bar_l + buf * 8, (j // NUM_BUFS) & 1, CLUSTER_SCOPE)
    chk = _read_back(ring, buf, ring_l + buf * SLOT, j * BLOCK_T, j, out_cta, orow, ocol, tid, chk, CHECK, BLOCK_T, D,
                     SLOT, KW)
    gl.thread_barrier()
    if j + NUM_BUFS < n_tiles:
        mbarrier.arrive(bars.index(NUM_BUFS + buf))
        _remote_arrive(bar_r + (NUM_BUFS + buf) * 8, CLUSTER_SCOPE)
    return chk


@gluon.jit
def _consume_local(ring, bars, ring_l, j, out_cta, orow, ocol, tid, chk, CHECK: gl.constexpr, BLOCK_T: gl.constexpr,
                   D: gl.constexpr, SLOT: gl.constexpr, KW: gl.constexpr, NUM_BUFS: gl.constexpr):
    buf = j % NUM_BUFS
    mbarrier.wait(bars.index(buf), (j // NUM_BUFS) & 1)
    chk = _read_back(ring, buf, ring_l + buf * SLOT, j * BLOCK_T, j, out_cta, orow, ocol, tid, chk, CHECK, BLOCK_T, D,
                     SLOT, KW)
    gl.thread_barrier()
    return chk


@gluon.jit
def probe_kernel(cache_u8, stride_page, block_size, num_tokens, idx_ptr, topk, out_ptr, sum_ptr, ring_off, bar_off,
                 D_NOPE: gl.constexpr, D_ROPE: gl.constexpr, TILE: gl.constexpr, DATA_BYTES: gl.constexpr,
                 SCALE_BYTES: gl.constexpr, BS_SHIFT: gl.constexpr, BLOCK_T: gl.constexpr, NUM_BUFS: gl.constexpr,
                 SHARED: gl.constexpr, CHECK: gl.constexpr, CLUSTER_SCOPE: gl.constexpr = False,
                 AHEAD: gl.constexpr = 1):
    D: gl.constexpr = D_NOPE + D_ROPE
    W: gl.constexpr = TILE // 4
    SLOT: gl.constexpr = BLOCK_T * D * 2  # bytes of one bf16 slot
    K_SMEM: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16)
    KW: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=32)
    ROWS: gl.constexpr = _rows_layout(gl.num_warps())
    pid = gl.program_id(0)
    qid = pid // 2
    idx_row = idx_ptr + qid.to(gl.int64) * topk
    end = topk
    cache_w = cache_u8.to(gl.pointer_type(gl.int32), bitcast=True)
    cache_d = cache_u8.to(gl.pointer_type(gl.int64), bitcast=True)

    ring = gl.allocate_shared_memory(gl.bfloat16, [NUM_BUFS, BLOCK_T, D], K_SMEM)
    bars = gl.allocate_shared_memory(gl.int64, [2 * NUM_BUFS + 1, 1], mbarrier.MBarrierLayout())  # full, empty, done
    for b in gl.static_range(NUM_BUFS):
        mbarrier.init(bars.index(b), count=1)
        mbarrier.init(bars.index(NUM_BUFS + b), count=2)
    mbarrier.init(bars.index(2 * NUM_BUFS), count=1)
    fence_async_shared()
    base = _smem_base()
    ring_l = base + ring_off
    bar_l = base + bar_off
    tid = gl.arange(0, 32 * gl.num_warps(), layout=gl.BlockedLayout([1], [32], [gl.num_warps()], [0]))
    chk = tid * 0
    OUTL: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [gl.num_warps(), 1], [1, 0])
    orow = gl.arange(0, BLOCK_T, layout=gl.SliceLayout(1, OUTL))
    ocol = gl.arange(0, D // 2, layout=gl.SliceLayout(0, OUTL))
    out_cta = out_ptr + pid.to(gl.int64) * (gl.cdiv(topk, BLOCK_T) * BLOCK_T * (D // 2))
    n_tiles = gl.cdiv(topk, BLOCK_T)

    if SHARED:
        HT: gl.constexpr = BLOCK_T // 2
        g, g3, w3 = _tile_layouts(HT, SCALE_BYTES, TILE)
        is_rope = g3 == SCALE_BYTES - 1
        _trap_unless_cluster_of_2()
        rank = _cluster_rank()
        peer = rank ^ 1
        my0 = rank * HT
        ring_r = _mapa(ring_l, peer)
        bar_r = _mapa(bar_l, peer)
        _cluster_sync()  # both CTAs' barriers initialised before any remote arrive or st.async
        idx = load_idx(idx_row, my0, end, HT, ROWS)
        words, rope, sbyte, valid = load_tile(cache_w, cache_d, cache_u8, idx, my0, end, num_tokens, stride_page,
                                              block_size, g, g3, w3, D_NOPE, DATA_BYTES, SCALE_BYTES, W, HT, ROWS,
                                              BS_SHIFT)
        idx = load_idx(idx_row, BLOCK_T + my0, end, HT, ROWS)
        i = 0
        for t0 in range(0, end, BLOCK_T):
            buf = i % NUM_BUFS
            n_words, n_rope, n_sbyte, n_valid = load_tile(cache_w, cache_d, cache_u8, idx, t0 + BLOCK_T + my0, end,
                                                          num_tokens, stride_page, block_size, g, g3, w3, D_NOPE,
                                                          DATA_BYTES, SCALE_BYTES, W, HT, ROWS, BS_SHIFT)
            idx = load_idx(idx_row, t0 + 2 * BLOCK_T + my0, end, HT, ROWS)
            lo, hi = dequant_tile(words, rope, sbyte, is_rope, False)
            # the slot is free in both CTAs once both consumers released it (a fresh barrier passes phase 1)
            _wait(bar_l + (NUM_BUFS + buf) * 8, ((i // NUM_BUFS) & 1) ^ 1, CLUSTER_SCOPE)
            if rank == 0:
                store_tile_rows(ring.index(buf), lo, hi, 0, HT, BLOCK_T, D)
            else:
                store_tile_rows(ring.index(buf), lo, hi, HT, HT, BLOCK_T, D)
            # the local stores to the async proxy: a consumer's wgmma would read them, and shared_bulk's copy does
            fence_async_shared()
            if SHARED == 2:  # every thread's half stored and fenced, then thread 0 copies it whole to the peer
                gl.thread_barrier()
                _bulk_to_peer(ring_l + buf * SLOT + my0 * 128, ring_r + buf * SLOT + my0 * 128, bar_r + buf * 8,
                              BLOCK_T * 128, SCALE_BYTES)
            else:
                _store_remote(lo, hi, ring_r + buf * SLOT, bar_r + buf * 8, my0, HT, BLOCK_T, SCALE_BYTES)
            gl.thread_barrier()
            mbarrier.expect(bars.index(buf), HT * D * 2)  # our one arrival, and the peer's half's bytes
            if i > 0:  # one tile behind, so the two CTAs may drift a tile apart (a split producer would)
                chk = _consume_shared(ring, bars, bar_l, bar_r, ring_l, i - 1, n_tiles, out_cta, orow, ocol, tid, chk,
                                      CHECK, CLUSTER_SCOPE, BLOCK_T, D, SLOT, KW, NUM_BUFS)
            words, rope, sbyte, valid = n_words, n_rope, n_sbyte, n_valid
            i += 1
        chk = _consume_shared(ring, bars, bar_l, bar_r, ring_l, n_tiles - 1, n_tiles, out_cta, orow, ocol, tid, chk,
                              CHECK, CLUSTER_SCOPE, BLOCK_T, D, SLOT, KW, NUM_BUFS)
        # done: the peer has consumed everything (so all our st.async landed) and sends us nothing more
        _remote_arrive(bar_r + 2 * NUM_BUFS * 8, CLUSTER_SCOPE)
        _wait(bar_l + 2 * NUM_BUFS * 8, 0, CLUSTER_SCOPE)
    else:
        g, g3, w3 = _tile_layouts(BLOCK_T, SCALE_BYTES, TILE)
        is_rope = g3 == SCALE_BYTES - 1
        gl.thread_barrier()
        idx = load_idx(idx_row, 0, end, BLOCK_T, ROWS)
        words, rope, sbyte, valid = load_tile(cache_w, cache_d, cache_u8, idx, 0, end, num_tokens, stride_page,
                                              block_size, g, g3, w3, D_NOPE, DATA_BYTES, SCALE_BYTES, W, BLOCK_T, ROWS,
                                              BS_SHIFT)
        idx = load_idx(idx_row, BLOCK_T, end, BLOCK_T, ROWS)
        if AHEAD == 2:  # a second tile's loads in flight: tile i+2's issued before tile i is dequantised
            words2, rope2, sbyte2, valid2 = load_tile(cache_w, cache_d, cache_u8, idx, BLOCK_T, end, num_tokens,
                                                      stride_page, block_size, g, g3, w3, D_NOPE, DATA_BYTES,
                                                      SCALE_BYTES, W, BLOCK_T, ROWS, BS_SHIFT)
            idx = load_idx(idx_row, 2 * BLOCK_T, end, BLOCK_T, ROWS)
        i = 0
        for t0 in range(0, end, BLOCK_T):
            buf = i % NUM_BUFS
            n_words, n_rope, n_sbyte, n_valid = load_tile(cache_w, cache_d, cache_u8, idx, t0 + AHEAD * BLOCK_T, end,
                                                          num_tokens, stride_page, block_size, g, g3, w3, D_NOPE,
                                                          DATA_BYTES, SCALE_BYTES, W, BLOCK_T, ROWS, BS_SHIFT)
            idx = load_idx(idx_row, t0 + (AHEAD + 1) * BLOCK_T, end, BLOCK_T, ROWS)
            lo, hi = dequant_tile(words, rope, sbyte, is_rope, False)
            store_tile_rows(ring.index(buf), lo, hi, 0, BLOCK_T, BLOCK_T, D)
            fence_async_shared()
            gl.thread_barrier()
            mbarrier.arrive(bars.index(buf))
            if i > 0:  # one tile behind, in the same order as the shared variant
                chk = _consume_local(ring, bars, ring_l, i - 1, out_cta, orow, ocol, tid, chk, CHECK, BLOCK_T, D,
                                     SLOT, KW, NUM_BUFS)
            if AHEAD == 2:
                words, rope, sbyte, valid = words2, rope2, sbyte2, valid2
                words2, rope2, sbyte2, valid2 = n_words, n_rope, n_sbyte, n_valid
            else:
                words, rope, sbyte, valid = n_words, n_rope, n_sbyte, n_valid
            i += 1
        chk = _consume_local(ring, bars, ring_l, n_tiles - 1, out_cta, orow, ocol, tid, chk, CHECK, BLOCK_T, D, SLOT,
                             KW, NUM_BUFS)
    gl.store(sum_ptr + pid * (32 * gl.num_warps()) + tid, chk)


# ----------------------------------------------------------------------------- compile (CPU or GPU)

# name: (SHARED, CLUSTER_SCOPE, warps, AHEAD). local_w8: the local producer's tile over 8 warps, so each thread
# dequantises half as much with the same bytes in flight; local_w8_ahead2: and a second tile's loads in flight (the
# registers 8 warps free), so that the two tell a producer bound by its own instructions from one bound by loads
VARIANTS = {"local": (False, False, 4, 1), "shared": (True, False, 4, 1), "shared_cl": (True, True, 4, 1),
            "local_w8": (False, False, 8, 1), "local_w8_ahead2": (False, False, 8, 2), "shared_bulk": (2, False, 4, 1)}
SIGNATURE = dict(cache_u8="*u8", stride_page="i64", block_size="i32", num_tokens="i32", idx_ptr="*i32", topk="i32",
                 out_ptr="*i32", sum_ptr="*i32", ring_off="i32", bar_off="i32")


def constexprs(shared: bool, check: bool, bs_shift: int = 8, cluster_scope: bool = False, ahead: int = 1) -> dict:
    L = MODEL1
    return dict(D_NOPE=L.d_nope, D_ROPE=L.d_rope, TILE=L.tile, DATA_BYTES=L.data_bytes_per_token,
                SCALE_BYTES=L.scale_bytes_per_token, BS_SHIFT=bs_shift, BLOCK_T=BLOCK_T, NUM_BUFS=NUM_BUFS,
                SHARED=shared, CHECK=check, CLUSTER_SCOPE=cluster_scope, AHEAD=ahead)


INT_ARGS = ("stride_page", "block_size", "num_tokens", "topk")


def compile_variant(shared: bool, check: bool = False, bs_shift: int = 8, capability: int = 90,
                    cluster_scope: bool = False, div16=INT_ARGS, warps: int = NUM_WARPS, ahead: int = 1):
    """triton.compile of one variant for sm_90a (works with no GPU); returns (kernel, ptxas -v log). div16: the
    integer arguments compiled as multiples of 16, as a JIT launch specialises them (the page stride of every
    MODEL1 cache is: 16-byte gathers; compiled plainly they become 4-byte loads)."""
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    const = constexprs(shared, check, bs_shift, cluster_scope, ahead)
    fn = probe_kernel
    sig = {a: SIGNATURE.get(a, "constexpr") for a in fn.arg_names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names)
             if sig[a].startswith("*") or a in div16}
    src = GluonASTSource(fn, sig, const, attrs=attrs)
    buf = io.StringIO()
    old = knobs.nvidia.dump_ptxas_log
    knobs.nvidia.dump_ptxas_log = True
    try:
        with contextlib.redirect_stdout(buf):
            k = triton.compile(src, target=GPUTarget("cuda", capability, 32),
                               options=dict(num_warps=warps, num_stages=1))
    finally:
        knobs.nvidia.dump_ptxas_log = old
    return k, buf.getvalue()


def smem_offsets(k) -> dict:
    """{type string: allocation.offset} of the kernel's explicit shared allocations: Triton's own shared-memory
    allocation pass (make_llir's passes up to it) run again on the compiled TTGIR."""
    from triton._C.libtriton import ir, passes, nvidia
    ctx = ir.context()
    ir.load_dialects(ctx)
    nvidia.load_dialects(ctx)
    with tempfile.NamedTemporaryFile("w", suffix=".ttgir", delete=False) as f:
        f.write(k.asm["ttgir"])
        path = f.name
    try:
        mod = ir.parse_mlir_module(path, ctx)
    finally:
        os.unlink(path)
    mod.context = ctx
    pm = ir.pass_manager(ctx)
    pm.enable_debug()
    passes.ttgpuir.add_combine_tensor_select_and_if(pm)
    passes.ttgpuir.add_allocate_warp_groups(pm)
    passes.convert.add_scf_to_cf(pm)
    passes.gluon.add_inliner(pm)
    cap = k.metadata.target.arch
    from triton.backends.nvidia.compiler import get_ptx_version_from_options, CUDAOptions
    ptx_version = get_ptx_version_from_options(CUDAOptions(), cap)
    nvidia.passes.ttgpuir.add_allocate_shared_memory_nv(pm, cap, ptx_version)
    pm.run(mod, "cluster_share_probe")
    text = str(mod)
    out = {}
    for m in re.finditer(r"ttg\.local_alloc\s*\{[^}]*allocation\.offset = (\d+) : i32[^}]*\}\s*:\s*\(\)\s*->\s*"
                         r"!ttg\.memdesc<([^>]*)>", text):
        out[m.group(2)] = int(m.group(1))
    return out


def ring_and_bar_offsets(k) -> tuple[int, int]:
    offs = smem_offsets(k)
    ring = [v for t, v in offs.items() if "bf16" in t]
    bar = [v for t, v in offs.items() if t.startswith(f"{2 * NUM_BUFS + 1}x1xi64")]
    if len(ring) != 1 or len(bar) != 1:
        raise RuntimeError(f"could not identify the ring and barrier allocations in {offs}")
    return ring[0], bar[0]


def _cuobjdump_sass(cubin: bytes) -> tuple[str, str]:
    import triton.backends.nvidia as nv
    tool = os.path.join(os.path.dirname(nv.__file__), "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
        path = f.name
    try:
        res = subprocess.run([tool, "--dump-resource-usage", path], capture_output=True, text=True).stdout
        sass = subprocess.run([tool, "--dump-sass", path], capture_output=True, text=True).stdout
    finally:
        os.unlink(path)
    return res, sass


def lab_numbers(k, log: str) -> dict:
    res, sass = _cuobjdump_sass(k.asm["cubin"])
    ops = Counter()
    for line in sass.splitlines():
        m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m:
            ops[m.group(1)] += 1
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    if not spill:  # a cache hit runs no ptxas: ask ptxas -v itself, as the resource lab does
        from workbench.lab.resources import _ptxas_spills
        spill = [None, *_ptxas_spills(k)]
        spill = dict(enumerate(spill))
        spill = type("S", (), {"group": lambda self, i, _s=spill: _s[i]})()
    reg = re.search(r"REG:(\d+)", res)
    ptx = k.asm["ptx"]
    return dict(
        shared_bytes=k.metadata.shared, registers=int(reg.group(1)) if reg else None,
        spill_stores=int(spill.group(1)) if spill else None, spill_loads=int(spill.group(2)) if spill else None,
        STAS_128=sum(v for o, v in ops.items() if o.startswith("STAS.128")),
        STAS=sum(v for o, v in ops.items() if o.startswith("STAS")),
        UBLKCP=sum(v for o, v in ops.items() if o.startswith("UBLKCP")),
        STS=sum(v for o, v in ops.items() if o.startswith("STS")),
        LDG=sum(v for o, v in ops.items() if o.startswith("LDG")),
        HMUL2=sum(v for o, v in ops.items() if o.startswith("HMUL2")),
        SYNCS=sum(v for o, v in ops.items() if o.startswith("SYNCS")),
        remote_arrive_sass=sum(v for o, v in ops.items() if o.startswith("SYNCS.ARRIVE") and "RED" in o),
        UCGABAR=sum(v for o, v in ops.items() if "CGABAR" in o),
        HGMMA=sum(v for o, v in ops.items() if o.startswith("HGMMA")),
        CCTL_IVALL=ops.get("CCTL.IVALL", 0), MEMBAR=sum(v for o, v in ops.items() if o.startswith("MEMBAR")),
        BAR_SYNC=sum(v for o, v in ops.items() if o.startswith("BAR.")),
        ptx_st_async=len(re.findall(r"\bst\.async\b", ptx)),
        ptx_remote_arrive=len(re.findall(r"mbarrier\.arrive(?:\.release\.cluster)?\.shared::cluster", ptx)),
        ptx_mapa=len(re.findall(r"\bmapa\.", ptx)),
        tile_loop=tile_loop_counts(sass),
        syncs_kinds=sorted({o for o in ops if o.startswith("SYNCS") or "CGABAR" in o or o.startswith("STAS")}),
    )


def tile_loop_counts(sass: str) -> str:
    """Opcode counts of the tile loop: the outermost SASS loop holding the gathers (workbench.lab.sass_loops; the
    mbarrier spin loops nest inside it)."""
    from workbench.lab.sass_loops import loops
    found = [lp for lp in loops(sass) if lp.count("LDG")]
    if not found:
        return "none"
    outer = [lp for lp in found if not any(o.contains(lp) for o in found)]
    lp = max(outer, key=lambda x: len(x.body))
    ops = lp.opcodes()
    keys = ("LDG", "HMUL2", "STS", "STAS", "SYNCS", "BAR", "MEMBAR", "CCTL", "LDS", "STG")
    return ",".join(f"{k}:{ops.get(k, 0)}" for k in keys) + f",instr:{len(lp.body)}"


def compile_only(args) -> int:
    rc = 0
    for name, (shared, scope, warps, ahead) in VARIANTS.items():
        for check in (False, True):
            try:
                k, log = compile_variant(shared, check, cluster_scope=scope, warps=warps, ahead=ahead)
                ring_off, bar_off = ring_and_bar_offsets(k)
                nums = lab_numbers(k, log)
            except Exception as e:  # noqa: BLE001 -- report which variant and why
                print(f"{name:7s} CHECK={int(check)}: COMPILE FAILED: {type(e).__name__}: {str(e)[:2000]}")
                rc = 1
                continue
            print(f"{name:7s} CHECK={int(check)} sm_90a: ring_off={ring_off} bar_off={bar_off} " +
                  " ".join(f"{a}={b}" for a, b in nums.items()))
            if args.dump:
                os.makedirs(args.dump, exist_ok=True)
                for ext in ("ttgir", "ptx"):
                    with open(os.path.join(args.dump, f"{name}_check{int(check)}.{ext}"), "w") as f:
                        f.write(k.asm[ext])
                with open(os.path.join(args.dump, f"{name}_check{int(check)}.sass"), "w") as f:
                    f.write(_cuobjdump_sass(k.asm["cubin"])[1])
    return rc


# ----------------------------------------------------------------------------- GPU: data, launch, check, time

def make_problem(b: int, topk: int, page: int, *, invalid: float = 0.0, seed: int = 0, device="cuda"):
    """A MODEL1 cache of random latent KV (quantize_kv, the real byte layout) with 2 * b * topk tokens' pages, and
    per query topk distinct random token indices (a share ``invalid`` of them -1)."""
    from workbench.format.codec import quantize_kv
    g = torch.Generator(device=device).manual_seed(seed)
    n_tok = max(2 * b * topk, 4 * page)
    pages = -(-n_tok // page)
    kv = torch.randn(pages, page, D, generator=g, device=device)
    kv = (kv * torch.exp(torch.randn(pages, page, 1, generator=g, device=device))).to(torch.bfloat16)
    cache = quantize_kv(kv)
    del kv
    num_tokens = pages * page
    idx = torch.stack([torch.randperm(num_tokens, generator=g, device=device)[:topk] for _ in range(b)])
    idx = idx.to(torch.int32)
    if invalid:
        idx[torch.rand(idx.shape, generator=g, device=device) < invalid] = -1
    return cache, idx.contiguous(), num_tokens


def reference_tiles(cache, idx) -> torch.Tensor:
    """[b, ceil(topk/64)*64, 512] bf16: each query's selected tokens dequantised (invalid or padding rows 0)."""
    from workbench.format.codec import gather_dequantized
    b, topk = idx.shape
    pad = -(-topk // BLOCK_T) * BLOCK_T
    ref = torch.zeros(b, pad, D, dtype=torch.bfloat16, device=idx.device)
    ok = idx >= 0
    ref[:, :topk][ok] = gather_dequantized(cache, idx[ok])
    return ref


def ints_of(cache, idx, num_tokens) -> dict:
    return dict(stride_page=cache.stride(0), block_size=cache.shape[1], num_tokens=num_tokens, topk=idx.shape[1])


class Launch:
    """One variant compiled on the device, with its shared offsets, launched (cluster of 2 for ``shared``)."""

    def __init__(self, shared: bool, check: bool, bs_shift: int, cluster_scope: bool = False, ints: dict = None,
                 warps: int = NUM_WARPS, ahead: int = 1):
        self.shared = shared
        div16 = tuple(a for a, v in (ints or {}).items() if v % 16 == 0)  # as a JIT launch specialises them
        self.k, _ = compile_variant(shared, check, bs_shift, capability=torch.cuda.get_device_capability()[0] * 10,
                                    cluster_scope=cluster_scope, div16=div16, warps=warps, ahead=ahead)
        self.ring_off, self.bar_off = ring_and_bar_offsets(self.k)
        self.const = constexprs(shared, check, bs_shift, cluster_scope, ahead)
        self.k._init_handles()
        md = self.k.metadata
        self.packed = (md.num_warps, 2 if shared else 1, md.shared)

    def __call__(self, cache, idx, num_tokens, out, sums):
        b, topk = idx.shape
        grid_x = b if self.shared else 2 * b  # the launcher multiplies grid x by the cluster size
        stream = torch.cuda.current_stream().cuda_stream
        runtime = dict(cache_u8=cache, stride_page=cache.stride(0), block_size=cache.shape[1], num_tokens=num_tokens,
                       idx_ptr=idx, topk=topk, out_ptr=out, sum_ptr=sums, ring_off=self.ring_off,
                       bar_off=self.bar_off)
        # the launcher takes every argument in order, constexprs included (it skips them), as JITFunction.run
        # passes them; packed metadata (num_warps, num_ctas, shared): num_ctas 2 makes the launch a cluster of 2
        args = [runtime[a] if a in runtime else self.const[a] for a in probe_kernel.arg_names]
        self.k.run(grid_x, 1, 1, stream, self.k.function, self.packed, None, None, None, *args)


def run_gpu(args) -> int:
    assert torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9, "needs an sm_90 GPU"
    print(f"device: {torch.cuda.get_device_name()}, triton {triton.__version__}, torch {torch.__version__}")
    rc, checked, rows = 0, {}, []  # checked: variant -> passed every check shape
    variants = {n: v for n, v in VARIANTS.items() if not args.variant or n in args.variant}
    shapes = [tuple(int(x) for x in s.split(",")) for s in args.shape] if args.shape else SHAPES
    if args.check:
        for b, topk, page, invalid in ((2, 256, 64, 0.1), (3, 200, 256, 0.0), (8, 2048, 256, 0.05)):
            cache, idx, num_tokens = make_problem(b, topk, page, invalid=invalid, seed=b)
            ref = reference_tiles(cache, idx)
            for name, (shared, scope, warps, ahead) in variants.items():
                launch = Launch(shared, True, page.bit_length() - 1, scope, ints_of(cache, idx, num_tokens), warps,
                                ahead)
                out = torch.full((2 * b, ref.shape[1], D // 2), -1, dtype=torch.int32, device="cuda")
                sums = torch.zeros(2 * b, 32 * warps, dtype=torch.int32, device="cuda")
                launch(cache, idx, num_tokens, out, sums)
                torch.cuda.synchronize()
                got = out.view(torch.bfloat16).view(b, 2, ref.shape[1], D)
                # values compared (a -0 and a +0 are equal); there is no NaN in these caches
                bad = [(q, r) for q in range(b) for r in range(2)
                       if not torch.equal(got[q, r].float(), ref[q].float())]
                checked[name] = checked.get(name, True) and not bad
                if bad:
                    q, r = bad[0]
                    bad_rows = (got[q, r].float() != ref[q].float()).any(1).nonzero().flatten()
                    print(f"check {name:7s} b{b} topk{topk} page{page}: FAIL, {len(bad)} of {2 * b} CTAs differ; "
                          f"first CTA (q{q}, rank {r}) rows {bad_rows[:16].tolist()}...")
                    rc = 1
                else:
                    print(f"check {name:7s} b{b} topk{topk} page{page}: ok, every CTA's tiles equal to the "
                          "torch dequant (workbench.format.codec.gather_dequantized)")
    if args.time:
        for b, h, topk, page in shapes:
            assert h == 128, "the probe models 2 head groups of 64"
            cache, idx, num_tokens = make_problem(b, topk, page, seed=1)
            out = torch.empty(1, dtype=torch.int32, device="cuda")
            sums = torch.zeros(2 * b, 32 * max(v[2] for v in VARIANTS.values()), dtype=torch.int32, device="cuda")
            for name, (shared, scope, warps, ahead) in variants.items():
                if checked.get(name) is False:  # a wrong answer has no time
                    print(f"time {name:7s} b{b} h{h} topk{topk} page{page}: not timed, it failed its check")
                    continue
                launch = Launch(shared, False, page.bit_length() - 1, scope, ints_of(cache, idx, num_tokens), warps,
                                ahead)
                fn = lambda: launch(cache, idx, num_tokens, out, sums)  # noqa: E731
                fn()
                torch.cuda.synchronize()
                if args.graph:
                    ms = triton.testing.do_bench_cudagraph(fn, rep=args.rep, quantiles=[0.5, 0.2, 0.8])
                else:
                    ms = triton.testing.do_bench(fn, rep=args.rep, quantiles=[0.5, 0.2, 0.8])
                med, p20, p80 = (1000 * m for m in ms)
                gb = 2 * b * (topk if not shared else topk / 2) * MODEL1.bytes_per_token / 1e9
                print(f"time {name:7s} b{b} h{h} topk{topk} page{page}: median {med:.1f} us  p20 {p20:.1f}  "
                      f"p80 {p80:.1f}  ({gb / (med * 1e-6):.0f} GB/s of gathered cache bytes)")
                rows.append(dict(probe="cluster_share", variant=name, warps=warps, ahead=ahead, batch=b, heads=h,
                                 topk=topk, block_size=page,
                                 mode="graph" if args.graph else "do_bench", median_us=med, p20_us=p20, p80_us=p80,
                                 gathered_gbps=gb / (med * 1e-6),
                                 check={True: "passed", False: "failed"}.get(checked.get(name), "not run")))
    if args.csv and rows:  # one long-format row per measurement, with the bench's provenance columns
        import pandas as pd

        from workbench.report.provenance import provenance
        prov = provenance()
        pd.DataFrame([{**r, **prov} for r in rows]).to_csv(args.csv, index=False)
        print(f"table: {args.csv}")
    return rc


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--compile-only", action="store_true",
                   help="compile both variants (timed and CHECK builds) for sm_90a with no GPU and print shared "
                        "bytes, registers, spills and SASS counts (STAS.128, remote arrives, SYNCS, HGMMA ...)")
    p.add_argument("--dump", metavar="DIR", help="with --compile-only: write each build's TTGIR, PTX and SASS there")
    p.add_argument("--check", action="store_true",
                   help="GPU: run the CHECK builds and compare every CTA's tiles with torch's dequant of the same "
                        "bytes")
    p.add_argument("--time", action="store_true",
                   help=f"GPU: time every variant at b,h,topk,page in {SHAPES}; median/p20/p80 us per variant")
    p.add_argument("--graph", action="store_true", help="with --time: time CUDA-graph replays "
                   "(do_bench_cudagraph, which does not clear L2 between replays, so a shape whose cache fits in L2 "
                   "reads warm) instead of do_bench (L2 cleared before each launch); compare within one mode only")
    p.add_argument("--csv", metavar="PATH", help="with --time: also write the times as a long-format table (one row "
                   "per variant and shape: median, p20, p80, whether it passed --check, and the provenance columns)")
    p.add_argument("--variant", action="append", choices=list(VARIANTS),
                   help="only this variant (repeat for more; default: all): e.g. one launch to profile under ncu")
    p.add_argument("--shape", action="append", metavar="B,H,TOPK,PAGE",
                   help=f"with --time: only this shape (repeat for more; default: {SHAPES}); H must be 128")
    p.add_argument("--rep", type=int, default=200, help="with --time: ms of repetitions per variant (default 200)")
    args = p.parse_args(argv)
    if not (args.compile_only or args.check or args.time):
        p.error("give --compile-only, or --check and/or --time")
    if args.compile_only:
        return compile_only(args)
    return run_gpu(args)


if __name__ == "__main__":
    sys.exit(main())
