"""Benchmark harness: runs a sweep into long-format rows (one per provider, shape and timing mode).

The parts live apart: :mod:`workbench.bench.sweeps` (shapes, named sweeps, the cold-KV input pool),
:mod:`workbench.bench.providers` (what is timed: FlashMLA, the registry's decodes and probes) and
:mod:`workbench.bench.timing` (how: cold-L2 eager, CUDA-graph replay, the ceilings). This module runs them
(:func:`bench_one`, :func:`run_sweep`), makes the table (:data:`COLUMNS`, :func:`rows_frame`) and
summarises it; it re-exports the names callers import from ``workbench.bench``.

Every provider is checked against the fp32 reference on the timed inputs before its time counts.
"""
from __future__ import annotations

import math
from dataclasses import asdict

from ..accounting import call_valid_tokens, decode_cost
from ..decode import sparse_mla_decode
from ..metrics import compare
from ..report.provenance import provenance
from .providers import (PLAN, FlashMLAProvider, PlanProvider, ProbeProvider, Skip, WorkbenchProvider, config_columns,
                        kernel_of, make_provider, provider_names, tuned_columns)
from .sweeps import (ALL_ORDER, BATCHES, HEADLINE, HEADS, POOL_TOKENS, ROTATIONS, SWEEPS, BenchShape, InputPool,
                     sweep_shapes)
from .timing import (MODES, OVERHEAD, QUANTILES, TIMERS, difference_quantiles, measure_ceilings, summarize, time_eager,
                     time_graph, time_idle)

__all__ = ["ALL_ORDER", "BATCHES", "COLUMNS", "HEADLINE", "HEADS", "MODES", "OVERHEAD", "PLAN", "POOL_TOKENS",
           "QUANTILES", "ROTATIONS", "SWEEPS", "TIMERS", "BenchShape", "FlashMLAProvider", "InputPool", "PlanProvider",
           "ProbeProvider", "Skip", "WorkbenchProvider", "bench_one", "config_columns", "fit_batch_model", "kernel_of",
           "make_provider", "measure_ceilings", "overhead_table", "provider_names", "rows_frame", "run_sweep",
           "summary_markdown", "sweep_shapes", "time_eager", "time_graph", "time_idle"]

COLUMNS = ["sweep", "provider", "kernel", "mode", "batch", "s_q", "heads", "topk", "block_size", "extra_topk",
           "extra_block_size", "config", "BLOCK_H", "BLOCK_T", "num_warps", "num_stages", "PREFETCH", "status", "reason", "median_us", "p20_us", "p80_us", "valid_tokens",
           "bytes", "flops", "gbps", "tflops", "frac_hbm", "frac_gemm", "check_rel_err", "check_passed",
           "hbm_copy_gbps", "gemm_tflops", "gpu", "capability", "sm_count", "driver", "cuda", "torch", "triton",
           "git_commit", "kernel_hash", "date"]


# ----------------------------------------------------------------------------- running

def bench_one(shape: BenchShape, provider: str, modes, *, pool: InputPool, ceilings: dict, config=None,
              sweep: str = "", prov: dict | None = None, providers_cache: dict | None = None) -> list[dict]:
    """Rows (one per mode) for one provider on one shape; skipped or wrong providers get a row saying why.

    modes: any of :data:`workbench.bench.timing.MODES`. Each timed mode is measured once on the same prepared calls;
    "overhead" is derived from the "eager_idle" and "graph" samples of this same call (measured here for it
    if not asked for as rows), and its row has time columns only (no GB/s or TFLOP/s: it is not a kernel time).
    """
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"mode: expected some of {MODES}, got {unknown}")
    prov = prov or provenance()
    base = dict(sweep=sweep, provider=provider, kernel=kernel_of(provider, shape), **asdict(shape),
                **config_columns(provider, config),
                **{k: prov.get(k) for k in COLUMNS if k in prov}, **ceilings)
    rows = []
    try:
        p = (providers_cache or {}).get(provider) or make_provider(provider)
        if providers_cache is not None:
            providers_cache[provider] = p
        inputs = pool.inputs(shape, sink=getattr(p, "sink", False))
        fns = [p.prepare(kw, config) for kw in inputs]
        if getattr(p, "is_probe", False):
            fns[0]()
            check = dict(out_rel_norm=math.nan, passed=True)
            if config is None:
                base.update(tuned_columns(p))
        else:
            out, lse = fns[0]()
            ref_out, ref_lse = sparse_mla_decode(**inputs[0], impl="reference")
            check = compare(out.float(), lse, ref_out.float(), ref_lse)
    except Skip as e:
        return [dict(base, mode=m, status="skipped", reason=str(e)) for m in modes]
    cost = decode_cost(batch=shape.batch, s_q=shape.s_q, heads=shape.heads, valid_tokens=call_valid_tokens(inputs[0]))
    base.update(valid_tokens=cost.valid_tokens, bytes=cost.bytes, flops=cost.flops,
                check_rel_err=check["out_rel_norm"], check_passed=check["passed"])
    samples: dict = {}  # mode -> microseconds per call, or the exception its timer raised

    def measured(mode):
        if mode not in samples:
            try:
                samples[mode] = TIMERS[mode](fns)
            except Exception as e:  # noqa: BLE001 - recorded in the rows that need it
                samples[mode] = e
        if isinstance(samples[mode], Exception):
            raise samples[mode]
        return samples[mode]

    for mode in modes:
        row = dict(base, mode=mode)
        if not check["passed"]:
            rows.append(dict(row, status="wrong", reason=f"check against the reference failed: {check}"))
            continue
        try:
            if mode == "overhead":
                med, p20, p80 = difference_quantiles(*(measured(m) for m in OVERHEAD))
            else:
                med, p20, p80 = summarize(measured(mode))
        except Exception as e:  # noqa: BLE001 - record, do not abort the sweep
            rows.append(dict(row, status="error", reason=f"{type(e).__name__}: {e}"[:300]))
            continue
        row.update(status="ok", reason="", median_us=med, p20_us=p20, p80_us=p80)
        if mode != "overhead":
            sec = med * 1e-6
            gbps, tflops = cost.bytes / sec / 1e9, cost.flops / sec / 1e12
            row.update(gbps=gbps, tflops=tflops, frac_hbm=gbps / ceilings["hbm_copy_gbps"],
                       frac_gemm=tflops / ceilings["gemm_tflops"])
        rows.append(row)
    del inputs, fns, samples
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


def _num(v, fmt: str) -> str:
    return "" if v is None or v != v else format(v, fmt)


def _shape_label(r) -> str:
    return BenchShape(int(r.batch), int(r.heads), int(r.topk), int(r.s_q), int(r.block_size), int(r.extra_topk),
                      int(r.extra_block_size)).label


def overhead_table(df):
    """The host overhead per call, one line per (shape, provider) with ok "overhead" rows: the median of each
    timing mode of that call and the overhead's p20 and p80 (us). Empty when the table has no overhead rows."""
    import pandas as pd
    ok = df[(df["status"] == "ok")].assign(config=lambda d: d["config"].fillna(""))
    keys = ok[ok["mode"] == "overhead"][["batch", "heads", "topk", "s_q", "block_size", "extra_topk",
                                         "extra_block_size", "provider", "config"]].drop_duplicates()
    out = []
    for k in keys.itertuples(index=False):
        same = ok
        for col, v in k._asdict().items():
            same = same[same[col] == v]
        line = dict(shape=_shape_label(k), provider=k.provider, config=k.config)
        for mode in MODES:
            line[f"{mode}_us"] = same[same["mode"] == mode].median_us.median()
        over = same[same["mode"] == "overhead"]
        line.update(overhead_p20_us=over.p20_us.median(), overhead_p80_us=over.p80_us.median())
        out.append(line)
    return pd.DataFrame(out, columns=["shape", "provider", "config", *(f"{m}_us" for m in MODES), "overhead_p20_us",
                                      "overhead_p80_us"])


def summary_markdown(df) -> str:
    """A markdown table of the ok rows (median and p20-p80, GB/s, TFLOP/s), then the host overhead per call when
    the table has "overhead" rows (:func:`overhead_table`)."""
    ok = df[df["status"] == "ok"].copy()
    lines = ["| provider | mode | shape | config | median us (p20-p80) | GB/s | TFLOP/s | % HBM |",
             "|---|---|---|---|---|---|---|---|"]
    for _, r in ok.iterrows():
        lines.append(f"| {r.provider} | {r['mode']} | {_shape_label(r)} | {r.config if isinstance(r.config, str) else ''} | {r.median_us:.1f} "
                     f"({r.p20_us:.1f}-{r.p80_us:.1f}) | {_num(r.gbps, '.0f')} | {_num(r.tflops, '.1f')} | "
                     f"{_num(100 * r.frac_hbm, '.0f')} |")
    bad = df[df["status"] != "ok"]
    for _, r in bad.iterrows():
        lines.append(f"| {r.provider} | {r['mode']} | b{r.batch} h{r.heads} k{r.topk} | | {r.status}: "
                     f"{str(r.reason)[:60]} | | | |")
    over = overhead_table(df) if "mode" in df.columns else []
    if len(over):
        lines += ["", "Host overhead per call: eager_idle minus graph (us; the other modes' medians beside it)", "",
                  "| shape | provider | overhead (p20-p80) | eager_idle | graph | eager |", "|---|---|---|---|---|---|"]
        for r in over.itertuples(index=False):
            who = f"{r.provider} {r.config}".strip()
            spread = f"{r.overhead_us:.1f} ({r.overhead_p20_us:.1f}-{r.overhead_p80_us:.1f})"
            lines.append(f"| {r.shape} | {who} | {spread} | {_num(r.eager_idle_us, '.1f')} | "
                         f"{_num(r.graph_us, '.1f')} | {_num(r.eager_us, '.1f')} |")
    return "\n".join(lines)


def rows_frame(rows: list[dict]):
    import pandas as pd
    df = pd.DataFrame(rows)
    for c in COLUMNS:
        if c not in df.columns:
            df[c] = math.nan
    return df[COLUMNS]
