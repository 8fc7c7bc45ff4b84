"""How the bench times a call: cold-L2 eager timing, CUDA-graph replay, and the machine's ceilings.

Each timer takes ``fns``, one zero-argument callable per input rotation (:data:`workbench.sweeps.ROTATIONS`
index sets, so no call re-reads what the call before it left in L2), and returns (median, p20, p80) in
microseconds per call.
"""
from __future__ import annotations

import torch

QUANTILES = [0.5, 0.2, 0.8]


def time_eager(fns: list, warmup_ms: float = 10, rep_ms: float = 60) -> tuple[float, float, float]:
    """(median, p20, p80) in microseconds; do_bench flushes L2 before each call, fns rotate inputs."""
    import triton
    it = [0]

    def step():
        fns[it[0] % len(fns)]()
        it[0] += 1
    ms = triton.testing.do_bench(step, warmup=warmup_ms, rep=rep_ms, quantiles=QUANTILES)
    return tuple(1000.0 * x for x in ms)


def time_graph(fns: list, replays: int = 30) -> tuple[float, float, float]:
    """(median, p20, p80) microseconds per call: one graph holds one call per rotation."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for f in fns:  # warm: autotuning and metadata happen before capture
            f()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for f in fns:
            f()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0 / len(fns))
    t = torch.tensor(times)
    return tuple(float(torch.quantile(t, q)) for q in QUANTILES)


def measure_ceilings(device="cuda") -> dict:
    """HBM copy bandwidth (read+write bytes) and bf16 GEMM rate, measured now."""
    import triton
    n = 1 << 30  # 1 GiB each way
    a = torch.empty(n, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    ms = triton.testing.do_bench(lambda: b.copy_(a), warmup=20, rep=200, quantiles=[0.5])
    ms = ms[0] if isinstance(ms, (list, tuple)) else ms
    copy_gbps = 2 * n / (ms * 1e-3) / 1e9
    del a, b
    m = 8192
    x = torch.randn(m, m, device=device, dtype=torch.bfloat16)
    y = torch.randn(m, m, device=device, dtype=torch.bfloat16)
    ms = triton.testing.do_bench(lambda: x @ y, warmup=50, rep=300, quantiles=[0.5])
    ms = ms[0] if isinstance(ms, (list, tuple)) else ms
    return dict(hbm_copy_gbps=copy_gbps, gemm_tflops=2 * m ** 3 / (ms * 1e-3) / 1e12)
