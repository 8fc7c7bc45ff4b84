"""Host overhead of the decode plan path (issue 10: at most 25 us per call above the GPU time, b1 h64 topk512).

GPU (default; an H200 is the target):

    TRITON_INTERPRET=0 .venv/bin/python scripts/plan_overhead.py [--impl auto] [--calls 200]

For impl at b1 h64 topk512 and b64 h16 topk2048 it checks that the plan path equals the plain path bit for
bit, then prints microseconds per call (medians, ``workbench.bench.timing``): the plain path and the plan path each
launched onto an idle GPU (``time_idle``: synchronize, then time one call, so all host time before and
between its kernels counts), the plan path replayed from a CUDA graph (``time_graph``: the kernels' own time),
and their differences, the host overhead per call (the bench's ``overhead`` rows). The issue's target: plan
minus graph at most 25 us at b1 h64 topk512. ``b2b`` is the plan path's time per call issued back to back
(host and GPU overlapping, as in serving).

CPU (``--stub``, TRITON_INTERPRET is set for it): the host-side Python of a call, piece by piece, with Triton's
C launch replaced by a no-op (see ``stub``): the plain path's key and lookup, its two output allocations, the
compiled replay of the launches, a whole cached plain call, and an explicit plan's check and whole call.

    .venv/bin/python scripts/plan_overhead.py --stub
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import timeit

SHAPES = ((1, 64, 512), (64, 16, 2048))  # (batch, heads, topk), s_q = 1, page size 64


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--impl", default="auto", help="kernel to plan (default auto)")
    p.add_argument("--calls", type=int, default=200, help="calls per idle / back-to-back timing (GPU)")
    p.add_argument("--stub", action="store_true", help="CPU: host cost with the kernel launches stubbed")
    p.add_argument("--calls-cpu", type=int, default=5000, help="calls per timing repeat (--stub)")
    p.add_argument("--micro", action="store_true",
                   help="GPU: host microseconds of the plain call's pieces (allocations, key, device queries)")
    p.add_argument("--breakdown", action="store_true",
                   help="GPU: each launch of the plan alone, host time per launch, PDL on and off, graph replay")
    return p.parse_args()


def gpu(args):
    import torch

    import workbench as wb
    from workbench.bench.timing import time_graph, time_idle

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


def breakdown(args):
    """GPU: where a plan call's time above its graph time goes, per shape.

    For the plan (PDL as the rule says, then forced on and off): idle time (``time_idle``) and graph time of the
    whole plan, of its first launch alone and of the rest alone; the host's own time (perf_counter, GPU idle)
    of one plan call and of each launch; and the idle time of replaying a CUDA graph that holds one plan call
    (what a plan replayed as one graph launch would cost).
    """
    import time

    import torch

    import workbench as wb
    from workbench import decode
    from workbench.plan import DecodePlan
    from workbench.bench.timing import time_graph, time_idle

    assert torch.cuda.is_available() and not wb.INTERPRET, "needs a CUDA GPU and TRITON_INTERPRET=0"

    def host_us(fn, n=200):
        samples = []
        for _ in range(n):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e6)
        torch.cuda.synchronize()
        return sorted(samples)[n // 2]

    print(f"{torch.cuda.get_device_name()}  impl={args.impl}  (us, medians; idle = sync, time one call)")
    print(f"{'shape':18} {'pdl':5} {'kernels':>7} {'idle':>6} {'graph':>6} {'host':>6} | {'1st idle':>8} "
          f"{'1st gr':>6} {'1st host':>8} | {'rest idle':>9} {'rest gr':>7} {'rest host':>9} | {'graph1 idle':>11}")
    for b, h, topk in SHAPES:
        kw = wb.build_case(batch=b, heads=h, topk=topk, block_size=64, device="cuda").kwargs()
        for pdl in (None, True, False):
            with decode.combine_launch(pdl) if pdl is not None else contextlib.nullcontext():
                plan = wb.plan_decode(**kw, impl=args.impl)
            inputs = tuple(kw.get(n) for n in decode.INPUT_NAMES)
            ptrs = [0 if t is None else t.data_ptr() for t in inputs]
            stream = torch.cuda.current_stream().cuda_stream
            first, rest = plan._launchers[:1], plan._launchers[1:]

            def whole():
                plan(**kw)

            def one():
                DecodePlan._run(first, ptrs, stream)

            def others():
                DecodePlan._run(rest, ptrs, stream)
            row = []
            for fn in (whole, one, others):
                row += [time_idle([fn], calls=args.calls)[0], time_graph([fn])[0], host_us(fn)]
            g = torch.cuda.CUDAGraph()
            whole()
            torch.cuda.synchronize()
            with torch.cuda.graph(g):
                whole()
            row.append(time_idle([g.replay], calls=args.calls)[0])
            tag = {None: "rule", True: "on", False: "off"}[pdl]
            print(f"{f'b{b} h{h} topk{topk}':18} {tag:5} {len(plan._launchers):7d} {row[0]:6.1f} {row[1]:6.1f} "
                  f"{row[2]:6.1f} | {row[3]:8.1f} {row[4]:6.1f} {row[5]:8.1f} | {row[6]:9.1f} {row[7]:7.1f} "
                  f"{row[8]:9.1f} | {row[9]:11.1f}")


def micro(args):
    """GPU: host time (perf_counter, best of 5 loops) of the pieces a plain call adds above a plan call at b1 h64
    topk512: the two output allocations, the cache key and lookup, the device and stream queries; and both calls
    whole, issued back to back."""
    import time

    import torch

    import workbench as wb
    from workbench import decode

    assert torch.cuda.is_available() and not wb.INTERPRET, "needs a CUDA GPU and TRITON_INTERPRET=0"

    def us(fn, n=5000):
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            best = min(best, (time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
        return best
    kw = wb.build_case(batch=1, heads=64, topk=512, block_size=64, device="cuda").kwargs()
    q, cache = kw["q"], kw["cache"]
    decode.PLAIN_PLANS.clear()
    wb.sparse_mla_decode(**kw)
    wb.sparse_mla_decode(**kw)
    (plan,) = decode.PLAIN_PLANS.plans()
    inputs = tuple(kw.get(n) for n in decode.INPUT_NAMES)
    ptrs = [0 if t is None else t.data_ptr() for t in inputs]
    explicit = wb.plan_decode(**kw)
    rows = {"torch.empty_like(out)": lambda: _empty_like(plan._out_like),
            "torch.empty_like(lse)": lambda: _empty_like(plan._lse_like),
            "current raw stream": lambda: decode._raw_stream(0),
            "is capturing": lambda: decode._capturing(),
            "storage nbytes": lambda: cache.untyped_storage().nbytes(),
            "q shape, stride, dtype, device": lambda: (q.shape, q.stride(), q.dtype, q.device)}
    for name, fn in rows.items():
        print(f"{name:40} {us(fn):7.2f} us")
    fresh, run = plan.fresh_call, plan._run
    plan.fresh_call = lambda *a: (None, None)  # the key and the lookup alone (a hit that launches nothing)
    print(f"{'plain call: key and lookup':40} {us(lambda: wb.sparse_mla_decode(**kw)):7.2f} us")
    plan.fresh_call = fresh
    plan._run = lambda *a: None
    print(f"{'plain call: fresh_call, no launches':40} {us(lambda: plan.fresh_call(inputs, ptrs)):7.2f} us")
    plan._run = run
    replay = explicit._replay
    explicit._replay = lambda *a: None
    print(f"{'plan call: checks, no launches':40} {us(lambda: wb.sparse_mla_decode(**kw, plan=explicit)):7.2f} us")
    explicit._replay = replay
    print(f"{'plain call, back to back':40} {us(lambda: wb.sparse_mla_decode(**kw), 1000):7.2f} us")
    print(f"{'plan call, back to back':40} {us(lambda: wb.sparse_mla_decode(**kw, plan=explicit), 1000):7.2f} us")


def _empty_like(t):
    import torch
    return torch.empty_like(t)


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


CASES = (("b1 h64 topk512", dict(batch=1, heads=64, topk=512)),
         ("b64 h16 topk2048", dict(batch=64, heads=16, topk=2048)),
         ("b64 h16 topk2048 +all inputs", dict(batch=64, heads=16, topk=2048, sink=True, topk_length=True,
                                                extra_topk=128, extra_topk_length=True)))


def stub(args):
    """Per-piece host cost on the CPU: the compiled replay with Triton's C launch replaced by a no-op.

    Each launch goes through a real ``CudaLauncher`` (Triton's Python wrapper of the C launch) whose C function is
    ``"".format`` (a builtin that takes any arguments and does nothing), so the Python a GPU call runs is timed.
    The plain path's first call is planned with the same stub (``plan.make_plan`` patched), so nothing is
    interpreted. What a GPU call adds is not here: the C launcher's argument parsing and cuLaunchKernelEx, the
    CUDA caching allocator, and the plain path's stream and capture queries.
    """
    import time
    from types import SimpleNamespace

    from triton.backends.nvidia.driver import CudaLauncher

    import workbench as wb
    from workbench import decode
    from workbench import plan as plan_mod

    impl = "tile512" if args.impl == "auto" else args.impl  # what auto is on the CPU (no Gluon there)

    def launcher(pdl):
        run = CudaLauncher.__new__(CudaLauncher)  # no compile: only the attributes its __call__ reads
        run.__dict__.update(num_ctas=1, launch="".format, global_scratch_size=0, global_scratch_align=1,
                            profile_scratch_size=0, profile_scratch_align=1, launch_cooperative_grid=False,
                            launch_pdl=pdl)
        return run

    def compile_stub(kernel, grid, launch_args):
        pdl = bool(launch_args.get("PDL", False))
        return SimpleNamespace(run=launcher(pdl), function=0, packed_metadata=(4, 1, 0),
                               launch_metadata=lambda *a: None, metadata=SimpleNamespace(launch_pdl=pdl))

    def make_plan_stubbed(user, *, sm_scale, impl, config, output_slots=False):
        return plan_mod.build_plan(user, sm_scale=sm_scale, impl=impl, config=config, compile_launch=compile_stub,
                                   get_stream=lambda device_index: 0, output_slots=output_slots)

    def us(fn, n=args.calls_cpu):
        return min(timeit.repeat(fn, number=n, repeat=9, timer=time.process_time)) / n * 1e6

    decode.use_plan_maker(make_plan_stubbed)  # the plain path's misses plan through decode's plan maker
    plans = decode.PLAIN_PLANS
    print(f"host-side us per call on the CPU (process time, min of 9 repeats), C launch stubbed, impl={impl}")
    print(f"{'case':30} {'key+lookup':>10} {'alloc':>7} {'launches':>9} {'plain hit':>10} {'plan chk':>9} "
          f"{'plan':>7}")
    for label, shape in CASES:
        kw = wb.build_case(**shape, block_size=64).kwargs()
        kw["impl"] = impl
        plans.clear()
        wb.sparse_mla_decode(**kw)  # the miss: plans (stubbed) and runs it
        wb.sparse_mla_decode(**kw)
        (plan,) = plans.plans()
        assert plans.stats()["hits"] == 1, plans.stats()
        inputs = tuple(kw.get(n) for n in decode.INPUT_NAMES)
        ptrs = [0 if t is None else t.data_ptr() for t in inputs]
        call_args = (kw["q"], kw["cache"], kw["indices"], kw.get("sm_scale"), kw.get("attn_sink"),
                     kw.get("topk_length"), kw.get("extra_cache"), kw.get("extra_indices"),
                     kw.get("extra_topk_length"), impl, None)
        t_hit = us(lambda: wb.sparse_mla_decode(**kw))
        plan.fresh_call = lambda *a: None  # the key and the lookup alone
        t_key = us(lambda: plans.call(*call_args))
        del plan.fresh_call
        plan._run = lambda *a: None  # fresh_call without its launches: the two allocations
        t_alloc = us(lambda: plan.fresh_call(inputs, ptrs))
        del plan._run
        out, lse = plan.fresh_call(inputs, ptrs)
        all_inputs, all_ptrs = (*inputs, out, lse), [*ptrs, out.data_ptr(), lse.data_ptr()]
        t_launch = us(lambda: plan._replay(all_inputs, all_ptrs))
        user = {n: kw.get(n) for n in decode.INPUT_NAMES}
        pplan = make_plan_stubbed(user, sm_scale=kw.get("sm_scale"), impl=impl, config=None)
        q, cache, indices = kw["q"], kw["cache"], kw["indices"]
        rest = {k: v for k, v in kw.items() if k not in ("q", "cache", "indices", "impl")}
        t_plan = us(lambda: wb.sparse_mla_decode(q, cache, indices, **rest, plan=pplan))
        pplan._replay = lambda *a: None
        t_check = us(lambda: wb.sparse_mla_decode(q, cache, indices, **rest, plan=pplan))
        print(f"{label:30} {t_key:10.2f} {t_alloc:7.2f} {t_launch:9.2f} {t_hit:10.2f} {t_check:9.2f} "
              f"{t_plan:7.2f}   ({len(plan.launches)} launches)")
    print("key+lookup: PLAIN_PLANS.call without the replay; alloc: fresh_call without its launches (out, lse); "
          "launches: the compiled replay of all launches (stream, argument lists, Triton's launcher); plain hit: "
          "a cached sparse_mla_decode call; plan chk: sparse_mla_decode(plan=) without the replay; plan: with it")


if __name__ == "__main__":
    a = parse_args()
    if a.micro:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
        micro(a)
    elif a.breakdown:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
        breakdown(a)
    elif a.stub:
        os.environ["TRITON_INTERPRET"] = "1"  # CPU tensors; must precede `import workbench`
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
        stub(a)
    else:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
        gpu(a)
