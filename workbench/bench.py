"""Benchmark harness: runs a sweep into long-format rows (one per provider, shape and timing mode).

The parts live apart: :mod:`workbench.sweeps` (shapes, named sweeps, the cold-KV input pool),
:mod:`workbench.providers` (what is timed: FlashMLA, the registry's decodes and probes) and
:mod:`workbench.timing` (how: cold-L2 eager, CUDA-graph replay, the ceilings). This module runs them
(:func:`bench_one`, :func:`run_sweep`), makes the table (:data:`COLUMNS`, :func:`rows_frame`) and
summarises it; it re-exports the names callers import from ``workbench.bench``.

Every provider is checked against the fp32 reference on the timed inputs before its time counts.
"""
from __future__ import annotations

import math
from dataclasses import asdict

from .accounting import call_valid_tokens, decode_cost
from .decode import sparse_mla_decode
from .metrics import compare
from .provenance import provenance
from .providers import (FlashMLAProvider, ProbeProvider, Skip, WorkbenchProvider, config_columns, kernel_of,
                        make_provider, provider_names)
from .sweeps import (ALL_ORDER, BATCHES, HEADLINE, HEADS, POOL_TOKENS, ROTATIONS, SWEEPS, BenchShape, InputPool,
                     sweep_shapes)
from .timing import QUANTILES, measure_ceilings, time_eager, time_graph

__all__ = ["ALL_ORDER", "BATCHES", "COLUMNS", "HEADLINE", "HEADS", "POOL_TOKENS", "QUANTILES", "ROTATIONS", "SWEEPS",
           "BenchShape", "FlashMLAProvider", "InputPool", "ProbeProvider", "Skip", "WorkbenchProvider", "bench_one",
           "config_columns", "fit_batch_model", "kernel_of", "make_provider", "measure_ceilings", "provider_names",
           "rows_frame", "run_sweep", "summary_markdown", "sweep_shapes", "time_eager", "time_graph"]

COLUMNS = ["sweep", "provider", "kernel", "mode", "batch", "s_q", "heads", "topk", "block_size", "extra_topk",
           "extra_block_size", "config", "BLOCK_H", "BLOCK_T", "num_warps", "num_stages", "PREFETCH", "status", "reason", "median_us", "p20_us", "p80_us", "valid_tokens",
           "bytes", "flops", "gbps", "tflops", "frac_hbm", "frac_gemm", "check_rel_err", "check_passed",
           "hbm_copy_gbps", "gemm_tflops", "gpu", "capability", "sm_count", "driver", "cuda", "torch", "triton",
           "git_commit", "kernel_hash", "date"]


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
