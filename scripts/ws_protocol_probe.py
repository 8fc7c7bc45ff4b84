"""A minimal warp-specialised Gluon kernel with one hand-off through shared memory ordered by an mbarrier, exactly
the pattern wgmma_ws uses for its valid mask (worker: store, fence, partition barrier, one arrive; default
partition: wait, load). It has no data race by construction, so whatever compute-sanitizer racecheck reports on
it is about the tool and Triton's warp-specialize protocol, not about a kernel of the workbench:

    compute-sanitizer --tool racecheck python3 scripts/ws_protocol_probe.py

It checks its own output (exit 1 if the hand-off lost a value). GPU only (sm_90).
"""
import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier

N = 128


@gluon.jit
def _consumer(buf, bar, out_ptr, N: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    mbarrier.wait(bar, 0)
    v = buf.load(L)
    gl.store(out_ptr + gl.arange(0, N, layout=L), v.to(gl.int32))


@gluon.jit
def _producer(buf, bar, N: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    buf.store((gl.arange(0, N, layout=L) % 100 + 1).to(gl.int8))
    fence_async_shared()
    gl.thread_barrier()
    mbarrier.arrive(bar)


@gluon.jit
def probe_kernel(out_ptr, N: gl.constexpr):
    buf = gl.allocate_shared_memory(gl.int8, [N], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    gl.warp_specialize([(_consumer, (buf, bar, out_ptr, N)), (_producer, (buf, bar, N))], [4], [48])


def main() -> int:
    out = torch.zeros(N, dtype=torch.int32, device="cuda")
    # maxnreg as wgmma_ws launches (so the partitions trade registers by setmaxnreg, as there)
    probe_kernel[(1,)](out, N=N, num_warps=4, maxnreg=int(sys.argv[1]) if len(sys.argv) > 1 else 168)
    torch.cuda.synchronize()
    want = torch.arange(N, device="cuda") % 100 + 1
    ok = bool(torch.equal(out.long(), want))
    print(f"ws protocol probe: hand-off {'intact' if ok else 'LOST VALUES'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
