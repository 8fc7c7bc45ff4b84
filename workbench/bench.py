"""Benchmark harness: providers, cold-L2 timing (eager and CUDA-graph replay), sweeps, long-format results.

Every timed call reads cold KV: indices are drawn at random from a pool cache of
about 600 MB (ten times the H200's L2), and each timed call uses another of
several index sets, so no call re-reads what an earlier one left in L2. Eager
timing uses triton.testing.do_bench, which also flushes L2 before each call.
Every provider is checked against the fp32 reference on the timed inputs
before its time counts.
"""
from __future__ import annotations

import importlib
import math
from dataclasses import asdict, dataclass

import torch

from .accounting import call_valid_tokens, decode_cost
from .cache import quantize_kv
from .decode import sparse_mla_decode
from .layout import MODEL1
from .metrics import compare
from .provenance import provenance

QUANTILES = [0.5, 0.2, 0.8]
POOL_TOKENS = 1 << 20        # ~612 MB of cache per page size
ROTATIONS = 8                # index sets cycled through by the timed calls
COLUMNS = ["sweep", "provider", "kernel", "mode", "batch", "s_q", "heads", "topk", "block_size", "extra_topk",
           "extra_block_size", "config", "BLOCK_H", "BLOCK_T", "num_warps", "num_stages", "PREFETCH", "status", "reason", "median_us", "p20_us", "p80_us", "valid_tokens",
           "bytes", "flops", "gbps", "tflops", "frac_hbm", "frac_gemm", "check_rel_err", "check_passed",
           "hbm_copy_gbps", "gemm_tflops", "gpu", "capability", "sm_count", "driver", "cuda", "torch", "triton",
           "git_commit", "kernel_hash", "date"]


@dataclass(frozen=True)
class BenchShape:
    batch: int
    heads: int
    topk: int
    s_q: int = 1
    block_size: int = 256
    extra_topk: int = 0
    extra_block_size: int = 64

    @property
    def label(self) -> str:
        x = f"+x{self.extra_topk}@{self.extra_block_size}" if self.extra_topk else ""
        return f"b{self.batch}-h{self.heads}-sq{self.s_q}-k{self.topk}@{self.block_size}{x}"


BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 132)
ALL_ORDER = ("headline", "baselines", "batch", "warps", "production", "s_q2", "configs")  # most important first
SWEEPS = ("smoke", "headline", "ladder", "forced", "crossover", "batch", "s_q2", "production", "baselines", "warps", "configs",
          "all")
HEADLINE = (BenchShape(64, 16, 2048), BenchShape(64, 64, 2048), BenchShape(64, 128, 2048), BenchShape(1, 64, 512),
            BenchShape(64, 16, 128, block_size=256, extra_topk=512, extra_block_size=64))
HEADS = (16, 32, 64, 128)


def sweep_shapes(name: str) -> list[tuple[BenchShape, tuple[str, ...], tuple[str, ...], dict | None]]:
    """(shape, providers, modes, forced config) for a named sweep."""
    fast = ("auto", "flashmla", "gather")  # the default kernel beside FlashMLA and the gather floor
    if name == "smoke":
        return [(BenchShape(2, 64, 512), ("auto", "flashmla", "simt", "reference"), ("eager", "graph"), None)]
    if name == "batch":
        return [(BenchShape(b, h, k), fast, ("eager",) + (("graph",) if b <= 8 else ()), None)
                for k in (512, 2048) for h in HEADS for b in BATCHES]
    if name == "s_q2":
        return [(BenchShape(b, 64, 2048, s_q=2), fast, ("eager",), None) for b in BATCHES]
    if name == "production":
        return [(BenchShape(b, h, 128, block_size=256, extra_topk=512, extra_block_size=64), fast,
                 ("eager",) + (("graph",) if b <= 8 else ()), None) for h in (64, 128) for b in BATCHES]
    if name == "baselines":
        return [(BenchShape(b, 64, 2048), ("simt", "reference"), ("eager",), None) for b in (1, 8, 64, 132)]
    if name == "warps":
        return [(BenchShape(b, h, 2048), ("mma",), ("eager",),
                 {"BLOCK_H": min(64, h), "BLOCK_T": 16, "num_warps": w, "num_stages": 1, "PREFETCH": int(h <= 32)})
                for h in (16, 64) for b in BATCHES for w in (4, 8)]
    if name == "configs":
        plan = []
        for h in (16, 64, 128):
            shape = BenchShape(64, h, 2048)
            plan += [(shape, ("mma",), ("graph",), {"BLOCK_H": min(64, h), "BLOCK_T": bt, "num_warps": w,
                                                      "num_stages": 1, "PREFETCH": pf})
                     for bt in (16, 32) for w in (4, 8) for pf in (0, 1)]
            plan.append((shape, fast, ("graph",), None))
        return plan + [(BenchShape(1, 64, 512), fast, ("graph",), None)]
    if name == "ladder":  # every rung beside FlashMLA and the gather floor, at the headline shapes
        from . import registry
        provs = tuple(r.name for r in registry.rungs()) + ("flashmla",) + registry.names("probe")
        return [(shape, provs, ("graph",), None) for shape in HEADLINE]
    if name == "forced":  # the configs the autotuner chooses among, each forced, to check its choice
        plan = []
        for shape, group in ((BenchShape(64, 16, 2048), 16), (BenchShape(64, 64, 2048), 64)):
            for kernel in ("tile512", "tile512_3d"):
                plan += [(shape, (kernel,), ("graph",), {"BLOCK_H": group, "BLOCK_T": bt, "num_warps": w,
                                                         "num_stages": st})
                         for bt in (16, 32) for w in ((4, 8) if group < 64 else (8,)) for st in (1, 3)]
            plan += [(shape, ("mma",), ("graph",), {"BLOCK_H": group, "BLOCK_T": bt, "num_warps": w, "num_stages": 1,
                                                    "PREFETCH": pf})
                     for bt in (16, 32) for w in ((4, 8) if group < 64 else (8,)) for pf in (0, 1)]
        return plan
    if name == "crossover":  # where the Gluon kernel starts to beat the best Triton rung ("auto" picks by it)
        return [(BenchShape(b, h, k), ("tile512", "wgmma"), ("graph",), None)
                for k in (512, 2048) for h in (16, 64) for b in (1, 2, 4, 8, 16, 32)]
    if name == "headline":
        return [(BenchShape(64, h, 2048), fast, ("eager", "graph"), None) for h in (16, 64, 128)] + \
               [(BenchShape(1, 64, 512), fast, ("eager", "graph"), None)]
    if name == "all":
        return [x for n in ALL_ORDER for x in sweep_shapes(n)]
    raise ValueError(f"sweep: expected one of {SWEEPS}; got {name!r}")


# ----------------------------------------------------------------------------- inputs

class InputPool:
    """Pool caches (one per page size) and per-shape rotating index sets, built on the GPU."""

    def __init__(self, device="cuda", pool_tokens: int = POOL_TOKENS, seed: int = 0):
        self.device, self.pool_tokens, self.seed = device, pool_tokens, seed
        self._caches: dict[int, torch.Tensor] = {}

    def cache(self, block_size: int) -> torch.Tensor:
        if block_size not in self._caches:
            g = torch.Generator(device=self.device).manual_seed(self.seed + block_size)
            nb = self.pool_tokens // block_size
            kv = torch.randn(nb, block_size, MODEL1.d, device=self.device, generator=g)
            mag = torch.pow(10.0, torch.rand(nb, block_size, MODEL1.num_tiles + 1, device=self.device, generator=g)
                            * 2 - 1)
            kv[..., : MODEL1.d_nope] *= mag[..., : MODEL1.num_tiles].repeat_interleave(MODEL1.tile, dim=-1)
            kv[..., MODEL1.d_nope:] *= mag[..., MODEL1.num_tiles:]
            self._caches[block_size] = quantize_kv(kv.to(torch.bfloat16))
            del kv
        return self._caches[block_size]

    def inputs(self, shape: BenchShape, rotations: int = ROTATIONS) -> list[dict]:
        g = torch.Generator(device=self.device).manual_seed(self.seed + hash(shape.label) % 10_000)
        q = (torch.randn(shape.batch, shape.s_q, shape.heads, MODEL1.d, device=self.device, generator=g)
             .to(torch.bfloat16))
        out = []
        for _ in range(rotations):
            kw = dict(q=q, cache=self.cache(shape.block_size), sm_scale=MODEL1.d ** -0.5,
                      indices=torch.randint(0, self.pool_tokens, (shape.batch, shape.s_q, shape.topk),
                                            device=self.device, generator=g, dtype=torch.int32))
            if shape.extra_topk:
                kw.update(extra_cache=self.cache(shape.extra_block_size),
                          extra_indices=torch.randint(0, self.pool_tokens,
                                                      (shape.batch, shape.s_q, shape.extra_topk),
                                                      device=self.device, generator=g, dtype=torch.int32))
            out.append(kw)
        return out


# ----------------------------------------------------------------------------- providers

class Skip(Exception):
    """A provider cannot run this shape here; the message is recorded as the reason."""


def _flashmla():
    try:
        return importlib.import_module("flash_mla")
    except Exception as e:  # noqa: BLE001 - any import failure means "not available"
        raise Skip(f"flash_mla not importable ({type(e).__name__}: {e}); install the 'peers' extra")


class FlashMLAProvider:
    """FlashMLA's SM90 MODEL1 decode (sgl-flash-mla, use_legacy=True); fewer than 64 heads are padded to 64."""

    name = "flashmla"

    def __init__(self):
        self.fm = _flashmla()
        if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
            raise Skip("FlashMLA's legacy MODEL1 kernel needs an sm_90 GPU")

    def prepare(self, kw: dict, config=None):
        if config is not None:
            raise Skip("FlashMLA takes no kernel config")
        h = kw["q"].shape[2]
        if h > 128:
            raise Skip(f"FlashMLA supports 64 or 128 heads, got {h}")
        hp = 64 if h <= 64 else 128
        q = kw["q"] if h == hp else torch.nn.functional.pad(kw["q"], (0, 0, 0, hp - h))
        sink = kw.get("attn_sink")
        if sink is not None and h != hp:
            sink = torch.nn.functional.pad(sink, (0, hp - h))
        meta = self.fm.get_mla_metadata()[0]
        args = dict(softmax_scale=kw["sm_scale"], indices=kw["indices"], attn_sink=sink,
                    topk_length=kw.get("topk_length"), extra_k_cache=kw.get("extra_cache"),
                    extra_indices_in_kvcache=kw.get("extra_indices"),
                    extra_topk_length=kw.get("extra_topk_length"), use_legacy=True)

        def run():
            out, lse = self.fm.flash_mla_with_kvcache(q, kw["cache"], None, None, MODEL1.d, meta, **args)
            return out[:, :, :h], lse[:, :h]
        return run


class WorkbenchProvider:
    def __init__(self, impl: str):
        self.name = impl
        if impl != "reference" and not torch.cuda.is_available():
            from .kernels.common import INTERPRET
            if not INTERPRET:
                raise Skip("no CUDA GPU (and TRITON_INTERPRET is not set)")

    def prepare(self, kw: dict, config=None):
        if self.name == "reference" and config is not None:
            raise Skip("the reference takes no kernel config")
        return lambda: sparse_mla_decode(**kw, impl=self.name, config=config)


class ProbeProvider:
    """A registered probe (the gather floor): the decode's split plan and bytes, no output to check."""

    is_probe = True

    def __init__(self, name: str):
        from . import registry
        self.name, self.spec = name, registry.get(name)
        if not torch.cuda.is_available():
            raise Skip("no CUDA GPU")

    def prepare(self, kw: dict, config=None):
        from .decode import split_plans
        q = kw["q"]
        b, s_q, h, _ = q.shape
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count
        scopes = [(kw["cache"], kw["indices"])]
        if kw.get("extra_cache") is not None:
            scopes.append((kw["extra_cache"], kw["extra_indices"]))
        plans = split_plans(queries=b * s_q, heads=h, indices=[ix for _, ix in scopes], num_sms=sms)
        sinks = [torch.empty(b * s_q, p.num_splits, dtype=torch.int32, device=q.device) for p in plans]

        def run():
            for (c, ix), p, sink in zip(scopes, plans, sinks):
                self.spec.launch(cache=c, indices=ix, num_splits=p.num_splits, tokens_per_split=p.tokens_per_split,
                                 sink=sink, config=config)
            return sinks
        return run


def provider_names() -> tuple[str, ...]:
    """Every provider the bench knows: the registered kernels (decodes and probes) and FlashMLA."""
    from . import registry
    return registry.names() + ("flashmla",)


def make_provider(name: str):
    """A provider object, or raise Skip with the reason it cannot run here."""
    from . import registry
    if name == "flashmla":
        return FlashMLAProvider()
    if name in registry.names("probe"):
        return ProbeProvider(name)
    if name in registry.decode_impls():
        return WorkbenchProvider(name)
    raise ValueError(f"provider: expected one of {provider_names()}, got {name!r}")


def kernel_of(provider: str, shape: BenchShape) -> str:
    """The kernel a provider runs on this shape here: "auto" is recorded as what it resolved to."""
    if provider != "auto":
        return provider
    from . import registry
    queries = shape.batch * shape.s_q
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return registry.resolve("auto", device, queries=queries, tokens=queries * (shape.topk + shape.extra_topk))


def config_columns(provider: str, config) -> dict:
    """The forced config as a short label and flat columns ('' and nothing else when autotuned)."""
    if config is None:
        return dict(config="")
    from . import registry
    typed = registry.get(provider).check_config(config)
    return dict(config=typed.label, **typed.columns())


# ----------------------------------------------------------------------------- timing

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


# ----------------------------------------------------------------------------- running

def bench_one(shape: BenchShape, provider: str, modes, *, pool: InputPool, ceilings: dict, config=None,
              sweep: str = "", prov: dict | None = None, providers_cache: dict | None = None) -> list[dict]:
    """Rows (one per mode) for one provider on one shape; skipped or wrong providers get a row saying why."""
    prov = prov or provenance()
    base = dict(sweep=sweep, provider=provider, kernel=kernel_of(provider, shape), **asdict(shape),
                **config_columns(provider, config),
                **{k: prov.get(k) for k in COLUMNS if k in prov}, **ceilings)
    rows = []
    try:
        p = (providers_cache or {}).get(provider) or make_provider(provider)
        if providers_cache is not None:
            providers_cache[provider] = p
        inputs = pool.inputs(shape)
        fns = [p.prepare(kw, config) for kw in inputs]
        if getattr(p, "is_probe", False):
            fns[0]()
            check = dict(out_rel_norm=math.nan, passed=True)
        else:
            out, lse = fns[0]()
            ref_out, ref_lse = sparse_mla_decode(**inputs[0], impl="reference")
            check = compare(out.float(), lse, ref_out.float(), ref_lse)
    except Skip as e:
        return [dict(base, mode=m, status="skipped", reason=str(e)) for m in modes]
    cost = decode_cost(batch=shape.batch, s_q=shape.s_q, heads=shape.heads, valid_tokens=call_valid_tokens(inputs[0]))
    base.update(valid_tokens=cost.valid_tokens, bytes=cost.bytes, flops=cost.flops,
                check_rel_err=check["out_rel_norm"], check_passed=check["passed"])
    for mode in modes:
        row = dict(base, mode=mode)
        if not check["passed"]:
            rows.append(dict(row, status="wrong", reason=f"check against the reference failed: {check}"))
            continue
        try:
            med, p20, p80 = time_graph(fns) if mode == "graph" else time_eager(fns)
        except Exception as e:  # noqa: BLE001 - record, do not abort the sweep
            rows.append(dict(row, status="error", reason=f"{type(e).__name__}: {e}"[:300]))
            continue
        sec = med * 1e-6
        gbps, tflops = cost.bytes / sec / 1e9, cost.flops / sec / 1e12
        rows.append(dict(row, status="ok", reason="", median_us=med, p20_us=p20, p80_us=p80, gbps=gbps,
                         tflops=tflops, frac_hbm=gbps / ceilings["hbm_copy_gbps"],
                         frac_gemm=tflops / ceilings["gemm_tflops"]))
    del inputs, fns
    return rows


def run_sweep(name: str, *, device="cuda", progress: bool = True, on_rows=None) -> list[dict]:
    """Run a named sweep on this GPU; returns long-format rows (also passed to on_rows as they come)."""
    from tqdm.auto import tqdm
    parts = ALL_ORDER if name == "all" else (name,)
    prov = provenance()
    ceilings = measure_ceilings(device)
    pool = InputPool(device)
    cache: dict = {}
    rows = []
    items = [(part, s, p, m, c) for part in parts for s, ps, m, c in sweep_shapes(part) for p in ps]
    for part, shape, provider, modes, config in tqdm(items, desc=f"bench {name}", disable=not progress):
        new = bench_one(shape, provider, modes, pool=pool, ceilings=ceilings, config=config, sweep=part,
                        prov=prov, providers_cache=cache)
        rows += new
        if on_rows is not None:
            on_rows(new)
    return rows


def fit_batch_model(df):
    """Least squares time = fixed + per_request * batch, per (provider, mode, heads, topk, s_q, extra)."""
    import numpy as np
    import pandas as pd
    keys = ["provider", "mode", "heads", "topk", "s_q", "extra_topk"]
    out = []
    ok = df[(df["status"] == "ok") & (df["config"].fillna("") == "")]
    for k, g in ok.groupby(keys):
        if g["batch"].nunique() < 3:
            continue
        A = np.stack([np.ones(len(g)), g["batch"].to_numpy(float)], axis=1)
        y = g["median_us"].to_numpy(float)
        (a, c), *_ = np.linalg.lstsq(A, y, rcond=None)
        pred = A @ np.array([a, c])
        r2 = 1 - ((y - pred) ** 2).sum() / max(((y - y.mean()) ** 2).sum(), 1e-30)
        out.append(dict(zip(keys, k), fixed_us=a, per_request_us=c, r2=r2, points=len(g)))
    return pd.DataFrame(out)


def summary_markdown(df) -> str:
    """A markdown table of the ok rows (median and p20-p80, GB/s, TFLOP/s)."""
    ok = df[df["status"] == "ok"].copy()
    lines = ["| provider | mode | shape | config | median us (p20-p80) | GB/s | TFLOP/s | % HBM |",
             "|---|---|---|---|---|---|---|---|"]
    for _, r in ok.iterrows():
        shape = BenchShape(int(r.batch), int(r.heads), int(r.topk), int(r.s_q), int(r.block_size),
                           int(r.extra_topk), int(r.extra_block_size)).label
        lines.append(f"| {r.provider} | {r['mode']} | {shape} | {r.config or ''} | {r.median_us:.1f} "
                     f"({r.p20_us:.1f}-{r.p80_us:.1f}) | {r.gbps:.0f} | {r.tflops:.1f} | {100 * r.frac_hbm:.0f} |")
    bad = df[df["status"] != "ok"]
    for _, r in bad.iterrows():
        lines.append(f"| {r.provider} | {r['mode']} | b{r.batch} h{r.heads} k{r.topk} | | {r.status}: "
                     f"{str(r.reason)[:60]} | | | |")
    return "\n".join(lines)


def rows_frame(rows: list[dict]):
    import pandas as pd
    df = pd.DataFrame(rows)
    for c in COLUMNS:
        if c not in df.columns:
            df[c] = math.nan
    return df[COLUMNS]
