"""Minimal warp-specialised Gluon kernels whose own code has no data race, built piece by piece like wgmma_ws, so
that what compute-sanitizer racecheck reports on them is about the tool and Triton's warp-specialize protocol, not
about a kernel of the workbench:

    compute-sanitizer --tool racecheck python3 scripts/ws_protocol_probe.py [--blocks N] [--pre] [--cbar] [--epi]
        [--capture] [--no-handoff]
    compute-sanitizer --tool racecheck python3 scripts/ws_protocol_probe.py --ring T [--late] [--blocks N]

Each block (--blocks of them, 1 by default) hands N bytes from a worker partition to the default partition through
shared memory, ordered by an mbarrier, exactly as wgmma_ws hands over its valid mask (worker: store, fence,
partition barrier, one arrive; default partition: wait, load); --no-handoff leaves the hand-off out (the worker only
arrives), so what is left is Triton's own dispatch. The switches add what wgmma_ws has around that:

- --pre: before the warp-specialised region the default warps store a tile into shared memory (the compiler drops
  the store unless --epi reads the tile), fence, and run a thread barrier (wgmma_ws: q into shared memory, the
  mbarriers' init);
- --cbar: the default partition runs a thread barrier of its own warps inside the region (wgmma_ws: the softmax's
  reductions and the barrier before the PV);
- --epi: after the region the default warps change a tile's layout through shared memory, as wgmma_ws's epilogue
  does;
- --capture: the worker uses a value the default warps loaded before the region (its arrive is predicated on it,
  and with the hand-off its bytes depend on it), which Triton hands over through shared memory beside the dispatch
  bytes (wgmma_ws: one of the split's bounds).

With --capture, --pre and --epi together Triton's generated code itself races: it places the captured word over the
--pre tile, which is dead once read back, with no barrier between the other warps' last reads of it and the store
(racecheck reports it; the self-check below rarely sees it, the window being a few instructions).

--ring T is the other direction as well, as the portable rungs run it: T tiles a block through a ring of 2 slots,
the worker storing each tile after its wait on the slot's `empty` mbarrier, the default warps reading it twice around
two partition barriers and handing it back after a third (rung 22) or, with --late, right after the next tile's
first barrier (rung 23).

It checks its own outputs (exit 1 if a value was lost). GPU only (sm_90). What racecheck reported on each variant
(H200, triton 3.6), and how that accounts for every report on wgmma_ws: data/sanitizer_h200_20261202-0113/README.md
and data/sanitizer_h200_20261202-0140/README.md.
"""
import argparse
import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier

N = 128  # bytes handed over per block
E = 32   # the epilogue tile: [E, E] int32


@gluon.jit
def _consumer(buf, bar, HANDOFF: gl.constexpr, CBAR: gl.constexpr, N: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    mbarrier.wait(bar, 0)
    if CBAR:
        gl.thread_barrier()
    if HANDOFF:
        v = buf.load(L).to(gl.int32)
    else:
        v = gl.arange(0, N, layout=L) % 100 + 1
    return (v,)  # the default partition's results come out of warp_specialize as a tuple


@gluon.jit
def _producer(buf, bar, k, HANDOFF: gl.constexpr, CAPTURE: gl.constexpr, N: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    if HANDOFF:
        if CAPTURE:
            buf.store(((gl.arange(0, N, layout=L) + k) % 100 + 1).to(gl.int8))
        else:
            buf.store((gl.arange(0, N, layout=L) % 100 + 1).to(gl.int8))
        fence_async_shared()
    gl.thread_barrier()
    if CAPTURE:
        mbarrier.arrive(bar, pred=k >= 0)  # k is 0: always arrives, but only a run-time value says so
    else:
        mbarrier.arrive(bar)


@gluon.jit
def probe_kernel(out_ptr,   # [blocks, N] int32
                 seed_ptr,  # [E * E + 1] int32: the epilogue's tile, then the captured value (0)
                 epi_ptr,   # [blocks, E, E] int32
                 HANDOFF: gl.constexpr, PRE: gl.constexpr, CBAR: gl.constexpr, EPI: gl.constexpr,
                 CAPTURE: gl.constexpr, N: gl.constexpr, E: gl.constexpr):
    pid = gl.program_id(0)
    CW: gl.constexpr = gl.num_warps()
    L: gl.constexpr = gl.BlockedLayout([1], [32], [CW], [0])
    ROWS: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [CW, 1], [1, 0])  # a thread per row
    COLS: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [1, CW], [0, 1])  # a thread per column: needs smem
    buf = gl.allocate_shared_memory(gl.int8, [N], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    r = gl.arange(0, E, layout=gl.SliceLayout(1, ROWS))
    c = gl.arange(0, E, layout=gl.SliceLayout(0, ROWS))
    seed = gl.load(seed_ptr + r[:, None] * E + c[None, :])  # [E, E] int32
    if PRE:
        stage = gl.allocate_shared_memory(gl.int32, [E, E], gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0]), seed)
        fence_async_shared()
        gl.thread_barrier()
        seed = stage.load(ROWS)
    k = gl.load(seed_ptr + E * E) if CAPTURE else 0  # a run-time value the worker needs
    v = gl.warp_specialize([(_consumer, (buf, bar, HANDOFF, CBAR, N)),
                            (_producer, (buf, bar, k, HANDOFF, CAPTURE, N))], [4], [48])[0]
    gl.store(out_ptr + pid * N + gl.arange(0, N, layout=L), v)
    if EPI:
        moved = gl.convert_layout(seed, COLS)
        rc = gl.arange(0, E, layout=gl.SliceLayout(1, COLS))
        cc = gl.arange(0, E, layout=gl.SliceLayout(0, COLS))
        gl.store(epi_ptr + pid * E * E + rc[:, None] * E + cc[None, :], moved)


@gluon.jit
def _ring_consumer(buf, full, empty, T, LATE: gl.constexpr, N: gl.constexpr):
    """Rung 22's and rung 23's slot protocol on a ring of 2 slots: each tile is read twice (as QK's K and as PV's V),
    around two partition barriers; the slot goes back after a third barrier (LATE false: rung 22) or after the next
    tile's first barrier (LATE true: rung 23, whose last slot is never handed back)."""
    L: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    acc = gl.zeros([N], gl.int32, layout=L)
    for t in range(T):
        s = t % 2
        mbarrier.wait(full.index(s), (t // 2) & 1)
        va = buf.index(s).load(L).to(gl.int32)
        gl.thread_barrier()
        if LATE:
            if t > 0:
                mbarrier.arrive(empty.index((t - 1) % 2))
        gl.thread_barrier()
        vb = buf.index(s).load(L).to(gl.int32)
        acc += va * (t + 1) + vb
        if not LATE:
            gl.thread_barrier()
            mbarrier.arrive(empty.index(s))
    return (acc,)


@gluon.jit
def _ring_producer(buf, full, empty, T, N: gl.constexpr):
    """portable_ws's producer protocol: wait for a free slot, store the tile, partition barrier, one arrive."""
    L: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    for t in range(T):
        s = t % 2
        mbarrier.wait(empty.index(s), ((t // 2) & 1) ^ 1)
        buf.index(s).store(((gl.arange(0, N, layout=L) + t) % 100 + 1).to(gl.int8))
        gl.thread_barrier()
        mbarrier.arrive(full.index(s))


@gluon.jit
def ring_kernel(out_ptr,  # [blocks, N] int32
                T, LATE: gl.constexpr, N: gl.constexpr):
    pid = gl.program_id(0)
    L: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    buf = gl.allocate_shared_memory(gl.int8, [2, N], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))  # the slot leads
    full = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(full.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    gl.thread_barrier()
    v = gl.warp_specialize([(_ring_consumer, (buf, full, empty, T, LATE, N)),
                            (_ring_producer, (buf, full, empty, T, N))], [4], [48])[0]
    gl.store(out_ptr + pid * N + gl.arange(0, N, layout=L), v)


def ring_main(a) -> int:
    """--ring T: T tiles through the 2-slot ring per block, the slot handed back early (rung 22) or --late (rung 23)."""
    out = torch.zeros(a.blocks, N, dtype=torch.int32, device="cuda")
    ring_kernel[(a.blocks,)](out, a.ring, LATE=a.late, N=N, num_warps=4, maxnreg=a.maxnreg)
    torch.cuda.synchronize()
    t = torch.arange(a.ring, device="cuda", dtype=torch.int64)[:, None]
    vals = (torch.arange(N, device="cuda")[None, :] + t) % 100 + 1  # [T, N]
    want = (vals * (t + 1) + vals).sum(0).expand(a.blocks, N)
    ok = bool(torch.equal(out.long(), want))
    print(f"ws ring probe (blocks {a.blocks}, {a.ring} tiles, release {'late' if a.late else 'early'}): "
          f"{'intact' if ok else 'LOST VALUES'}")
    return 0 if ok else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--blocks", type=int, default=1, help="blocks in the grid (default 1)")
    p.add_argument("--pre", action="store_true", help="shared stores and a barrier before the region")
    p.add_argument("--cbar", action="store_true", help="a thread barrier in the default partition")
    p.add_argument("--epi", action="store_true", help="a layout change through shared memory after the region")
    p.add_argument("--capture", action="store_true", help="the worker uses a value loaded before the region")
    p.add_argument("--no-handoff", dest="handoff", action="store_false", help="no bytes through shared memory")
    p.add_argument("--maxnreg", type=int, default=168, help="the block's register cap (wgmma_ws: 168)")
    p.add_argument("--ring", type=int, default=0, metavar="T",
                   help="instead: T tiles through a ring of 2 slots, the portable rungs' protocol (ring_kernel)")
    p.add_argument("--late", action="store_true", help="with --ring: hand a slot back one barrier later (rung 23)")
    a = p.parse_args(argv)
    if a.blocks < 1:
        p.error("--blocks must be >= 1")
    if a.late and not a.ring:
        p.error("--late needs --ring")
    if not 0 <= a.ring <= 4096:
        p.error("--ring: 0 (off) to 4096 tiles (the self-check's int32 sums overflow past ~6,500)")
    if a.ring:
        return ring_main(a)
    out = torch.zeros(a.blocks, N, dtype=torch.int32, device="cuda")
    seed = torch.arange(E * E + 1, dtype=torch.int32, device="cuda") * 7 + 3
    seed[-1] = 0  # the captured value
    epi = torch.zeros(a.blocks, E, E, dtype=torch.int32, device="cuda")
    probe_kernel[(a.blocks,)](out, seed, epi, HANDOFF=a.handoff, PRE=a.pre, CBAR=a.cbar, EPI=a.epi,
                              CAPTURE=a.capture, N=N, E=E, num_warps=4, maxnreg=a.maxnreg)
    torch.cuda.synchronize()
    want = (torch.arange(N, device="cuda") % 100 + 1).expand(a.blocks, N)
    tile = seed[:E * E].reshape(E, E)
    ok = bool(torch.equal(out.long(), want)) and (not a.epi or bool(torch.equal(epi, tile.expand(a.blocks, E, E))))
    flags = " ".join(f"--{k}" for k in ("pre", "cbar", "epi", "capture") if getattr(a, k)) + (
        "" if a.handoff else " --no-handoff")
    print(f"ws protocol probe (blocks {a.blocks} {flags.strip() or 'plain'}): {'intact' if ok else 'LOST VALUES'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
