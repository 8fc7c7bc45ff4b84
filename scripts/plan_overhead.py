"""Host overhead of the decode plan path (issue 10: at most 25 us per call above the GPU time, b1 h64 topk512).

GPU (default; an H200 is the target):

    TRITON_INTERPRET=0 .venv/bin/python scripts/plan_overhead.py [--impl auto] [--calls 200]

For impl at b1 h64 topk512 and b64 h16 topk2048 it checks that the plan path equals the plain path bit for
bit, then prints microseconds per call (medians, ``workbench.timing``): the plain path and the plan path each
launched onto an idle GPU (``time_idle``: synchronize, then time one call, so all host time before and
between its kernels counts), the plan path replayed from a CUDA graph (``time_graph``: the kernels' own time),
and their differences, the host overhead per call (the bench's ``overhead`` rows). The issue's target: plan
minus graph at most 25 us at b1 h64 topk512. ``b2b`` is the plan path's time per call issued back to back
(host and GPU overlapping, as in serving).

CPU (``--stub``): the host-side cost alone, with the C launch replaced by a no-op (the plan's compiled replay
path with its kernels stubbed) and, for comparison, the plain path with its launches only recorded
(``capture_launches``, so Triton's own launch cost is not counted).
"""
from __future__ import annotations

import argparse
import os
import sys
import timeit

SHAPES = ((1, 64, 512), (64, 16, 2048))  # (batch, heads, topk), s_q = 1, page size 64


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--impl", default="auto", help="kernel to plan (default auto)")
    p.add_argument("--calls", type=int, default=200, help="calls per idle / back-to-back timing (GPU)")
    p.add_argument("--stub", action="store_true", help="CPU: host cost with the kernel launches stubbed")
    return p.parse_args()


def gpu(args):
    import torch

    import workbench as wb
    from workbench.timing import time_graph, time_idle

    assert torch.cuda.is_available() and not wb.INTERPRET, "needs a CUDA GPU and TRITON_INTERPRET=0"
    print(f"{torch.cuda.get_device_name()}  impl={args.impl}  (us per call, medians)")
    print(f"{'shape':20} {'kernel':12} {'plain':>8} {'plan':>8} {'graph':>8} {'plain-graph':>12} {'plan-graph':>11} "
          f"{'plan b2b':>9}")
    for b, h, topk in SHAPES:
        kw = wb.build_case(batch=b, heads=h, topk=topk, block_size=64, device="cuda").kwargs()
        plan = wb.plan_decode(**kw, impl=args.impl)
        out_ref, lse_ref = wb.sparse_mla_decode(**kw, impl=args.impl)
        out, lse = wb.sparse_mla_decode(**kw, plan=plan)
        torch.cuda.synchronize()
        assert torch.equal(out, out_ref) and torch.equal(lse, lse_ref), f"plan != plain at b{b} h{h} topk{topk}"

        def plain():
            wb.sparse_mla_decode(**kw, impl=args.impl)

        def planned():
            wb.sparse_mla_decode(**kw, plan=plan)
        t_plain = time_idle([plain], calls=args.calls)[0]
        t_plan = time_idle([planned], calls=args.calls)[0]
        t_graph = time_graph([planned])[0]
        t_b2b = back_to_back_us(planned, args.calls)
        print(f"{f'b{b} h{h} topk{topk}':20} {plan.impl:12} {t_plain:8.1f} {t_plan:8.1f} {t_graph:8.1f} "
              f"{t_plain - t_graph:12.1f} {t_plan - t_graph:11.1f} {t_b2b:9.1f}")


def back_to_back_us(fn, calls: int) -> float:
    """Microseconds per call of ``calls`` calls issued back to back, then one sync (best of 5)."""
    import torch
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) * 1000.0 / calls)
    return best


def stub(args):
    from types import SimpleNamespace

    import workbench as wb
    from workbench import plan as plan_mod
    from workbench.kernels.common import capture_launches

    impl = "tile512" if args.impl == "auto" else args.impl  # what auto is on the CPU (no Gluon there)

    def no_launch(*launch_args):
        return None

    def compile_stub(kernel, grid, launch_args):
        return SimpleNamespace(run=no_launch, function=0, packed_metadata=(4, 1, 0), launch_metadata=no_launch)
    print(f"host-side us per call on the CPU, C launch stubbed, impl={impl}")
    for b, h, topk in SHAPES:
        kw = wb.build_case(batch=b, heads=h, topk=topk, block_size=64).kwargs()
        user = {name: kw.get(name) for name in wb.decode.INPUT_NAMES}
        plan = plan_mod.build_plan(user, sm_scale=None, impl=impl, config=None, compile_launch=compile_stub,
                                   get_stream=lambda device_index: 0)
        q, cache, indices = kw["q"], kw["cache"], kw["indices"]
        n = 20000
        t_plan = min(timeit.repeat(lambda: wb.sparse_mla_decode(q, cache, indices, plan=plan), number=n,
                                   repeat=7)) / n * 1e6
        with capture_launches():
            t_plain = min(timeit.repeat(lambda: wb.sparse_mla_decode(q, cache, indices, impl=impl), number=200,
                                        repeat=7)) / 200 * 1e6
        print(f"b{b} h{h} topk{topk}: plan path {t_plan:.2f} us ({len(plan.launches)} launches), "
              f"plain path {t_plain:.1f} us without Triton's launch")


if __name__ == "__main__":
    a = parse_args()
    if a.stub:
        os.environ["TRITON_INTERPRET"] = "1"  # CPU tensors; must precede `import workbench`
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
        stub(a)
    else:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
        gpu(a)
