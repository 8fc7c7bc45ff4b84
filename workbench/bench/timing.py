"""How the bench times a call: cold-L2 eager timing, eager from an idle GPU, CUDA-graph replay, the ceilings.

Each timer takes ``fns``, one zero-argument callable per input rotation (:data:`workbench.bench.sweeps.ROTATIONS`
index sets, so no call re-reads what the call before it left in L2), and returns samples in microseconds
per call; :func:`summarize` makes them (median, p20, p80). The timing modes (a row's ``mode``):

- ``eager``: ``triton.testing.do_bench``, which flushes L2 (writes 256 MB) before each call and times from
  after the flush. The host prepares the call while the GPU flushes, so up to the flush's duration (256 MB
  written, roughly 60 us on an H200) of host time per call is hidden from this time: it is the eager time
  of the published tables, not a measure of host overhead.
- ``eager_idle``: each call launched from Python onto an idle GPU (synchronize, then time the call), so
  every microsecond the host spends before and between the call's kernels is inside the time. No L2
  flush: the calls cycle through the rotations as graph replay does, so both see the same L2 state.
- ``graph``: one CUDA graph holds one call per rotation; replay time divided by the calls (the kernels'
  own time; the replay's own launch latency, spread over its calls, is inside it). The graph is replayed
  for :data:`GRAPH_WARM_MS` before the timed replays: a new graph's first replays can run slower for
  several ms (H200, b64 h16 topk2048, wgmma_f16_2cta: the first 17 of 200 replays, ~7.5 ms, at 55-57 us
  a call, every later one at ~53; with 30 timed replays after one warm replay the median landed in either
  group), and the eager timer warms for 10 ms too.
- ``overhead``: derived, not timed: ``eager_idle`` minus ``graph`` per call, the host's cost of one call
  above the kernels' own GPU time (:data:`OVERHEAD`, :func:`difference_quantiles`).
"""
from __future__ import annotations

import math

import numpy as np
import torch

QUANTILES = [0.5, 0.2, 0.8]
GRAPH_WARM_MS = 25.0  # replayed, untimed, before the graph's timed replays (see ``graph`` above)
GRAPH_WARM_MAX_REPLAYS = 2000  # bounds the host's part: a graph of a few-us calls would take thousands


def summarize(samples) -> tuple[float, float, float]:
    """(median, p20, p80) of samples, linear interpolation between order statistics (as do_bench does)."""
    a = np.asarray(samples, dtype=float)
    if not a.size:
        raise ValueError("no samples to summarise")
    return tuple(float(x) for x in np.quantile(a, QUANTILES))


def difference_quantiles(a, b) -> tuple[float, float, float]:
    """(median, p20, p80) of x - y over every pair of a sample x of ``a`` and y of ``b``: the spread of the
    difference between two independent draws, for timings that cannot be paired call by call."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return summarize(np.subtract.outer(a, b).ravel())


def eager_samples(fns: list, warmup_ms: float = 10, rep_ms: float = 60) -> list[float]:
    """Microseconds per call under do_bench (L2 flushed before each call), fns taken in turn."""
    import triton
    it = [0]

    def step():
        fns[it[0] % len(fns)]()
        it[0] += 1
    ms = triton.testing.do_bench(step, warmup=warmup_ms, rep=rep_ms, return_mode="all")
    return [1000.0 * x for x in ms]


def idle_samples(fns: list, calls: int = 200, warm_rounds: int = 2) -> list[float]:
    """Microseconds per call, each launched onto an idle GPU: synchronize, record, call, record.

    The time runs from the start event (the GPU reaches it at once: nothing is queued) to the end of the
    call's last kernel, so it holds the host's whole cost of the call before and between its kernels.
    """
    for _ in range(warm_rounds):  # autotuning, compiling and first-call metadata happen here, untimed
        for f in fns:
            f()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
    for i in range(calls):
        f = fns[i % len(fns)]
        torch.cuda.synchronize()
        starts[i].record()
        f()
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends)]


def graph_samples(fns: list, replays: int = 30, warm_ms: float = GRAPH_WARM_MS) -> list[float]:
    """Microseconds per call, one sample per replay: one graph holds one call per rotation; replayed untimed
    for about ``warm_ms`` first (at most GRAPH_WARM_MAX_REPLAYS times, after two replays that size it)."""
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

    def replay_ms() -> float:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        return a.elapsed_time(b)

    graph.replay()  # the first replay carries the graph's upload: the warm-up is sized from the second
    torch.cuda.synchronize()
    for _ in range(min(GRAPH_WARM_MAX_REPLAYS, math.ceil(warm_ms / max(replay_ms(), 1e-3)))):
        graph.replay()
    torch.cuda.synchronize()
    return [replay_ms() * 1000.0 / len(fns) for _ in range(replays)]


# the timed modes, and the derived one: "overhead" = OVERHEAD[0] minus OVERHEAD[1], per call
TIMERS = {"eager": eager_samples, "eager_idle": idle_samples, "graph": graph_samples}
OVERHEAD = ("eager_idle", "graph")
MODES = (*TIMERS, "overhead")


def time_eager(fns: list, warmup_ms: float = 10, rep_ms: float = 60) -> tuple[float, float, float]:
    """(median, p20, p80) in microseconds; do_bench flushes L2 before each call, fns rotate inputs."""
    return summarize(eager_samples(fns, warmup_ms, rep_ms))


def time_idle(fns: list, calls: int = 200) -> tuple[float, float, float]:
    """(median, p20, p80) microseconds per call launched onto an idle GPU (see :func:`idle_samples`)."""
    return summarize(idle_samples(fns, calls))


def time_graph(fns: list, replays: int = 30) -> tuple[float, float, float]:
    """(median, p20, p80) microseconds per call: one graph holds one call per rotation."""
    return summarize(graph_samples(fns, replays))


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
