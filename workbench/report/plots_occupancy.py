"""Notebook 03's figures: shared memory, registers, the pruning model against the compiler, 4 vs 8
warps, and the sm_120 projection from the H200 proxy times and the compile-only lab.

The shared look, save helpers and provenance notes are in :mod:`workbench.report.figures`.
"""
from __future__ import annotations

import numpy as np

from .figures import (PROVIDER_COLORS, SEED, categorical_batch_axis, figure_handles, gapped_line, legend_below,
                      legend_right, pad_log_limits, readable_log_axis, seeded_strip)


# ----------------------------------------------------------------------------------------------
# occupancy (notebook 03)
# ----------------------------------------------------------------------------------------------
STATUS_COLORS = {"fits": "C2", "pruned": "C1", "over_limit": "C3", "compile_error": "k"}


def fig_shared_memory(mma, archs, limits: dict, titles: dict):
    """Compiled shared memory per config (KB) against each target's per-block limit (KB)."""
    import matplotlib.pyplot as plt
    import seaborn as sns
    pal = dict(zip(STATUS_COLORS, sns.color_palette("colorblind", 4)[::-1]))
    pal = {"fits": "#009E73", "pruned": "#E69F00", "over_limit": "#D55E00", "compile_error": "#000000"}
    tiles = sorted(mma.tile.unique(), key=lambda t: tuple(int(x[1:]) for x in t.split()))
    statuses = [s for s in STATUS_COLORS if s in set(mma.status)]
    fig, axes = plt.subplots(1, len(archs), figsize=(6.5 * len(archs), 4.2), sharey=True, squeeze=False)
    for ax, arch in zip(axes[0], archs):
        sub = mma[mma.arch == arch].assign(kb=lambda d: d.shared_bytes / 1024)
        seeded_strip(ax, sub, "tile", "kb", order=tiles, hue="status", hue_order=statuses, palette=pal)
        lim = limits[arch] / 1024
        ax.axhline(lim, color="k", linestyle="--", linewidth=1)
        ax.text(len(tiles) - 0.5, lim, f"per-block limit {lim:.0f} KB ", va="bottom", ha="right", fontsize=9)
        ax.set_xlabel("BLOCK_H, BLOCK_T")
        ax.set_ylabel("compiled shared memory (KB)" if ax is axes[0][0] else "")
        ax.tick_params(axis="x", rotation=45)
        ax.set_title(titles.get(arch, arch), fontsize=10)
    top = max(float(mma.shared_bytes.max()), *limits.values()) / 1024
    axes[0][0].set_ylim(0, top * 1.12)
    h, lab = figure_handles(fig)
    legend_right(fig, h, lab, title="status")
    fig.tight_layout()
    return fig


def fig_registers(mma, archs, max_registers: int = 255):
    """Registers per thread, spill stores and resident warps per config, per target (seeded jitter)."""
    import matplotlib.pyplot as plt
    import seaborn as sns
    tiles = sorted(mma.tile.unique(), key=lambda t: tuple(int(x[1:]) for x in t.split()))
    pal = dict(zip(archs, sns.color_palette("colorblind", len(archs))))
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.4))
    kw = dict(order=tiles, hue="arch", hue_order=archs, palette=pal, dodge=True)
    seeded_strip(axes[0], mma, "tile", "registers", **kw)
    axes[0].axhline(max_registers, color="k", linestyle="--", linewidth=1)
    axes[0].text(-0.4, max_registers + 6, f"{max_registers}: most registers a thread can have", va="bottom",
                 fontsize=8)
    axes[0].set_ylim(0, max_registers * 1.2)
    axes[0].set_ylabel("registers per thread")
    seeded_strip(axes[1], mma.assign(spill=mma.spill_stores.clip(lower=0) + 1), "tile", "spill", **kw, seed=SEED + 1)
    axes[1].set_yscale("log")
    axes[1].set_ylabel("spill stores + 1 (bytes, log)")
    seeded_strip(axes[2], mma, "tile", "warps_per_sm", **kw, seed=SEED + 2)
    axes[2].set_ylabel("resident warps per SM")
    for ax in axes:
        ax.set_xlabel("BLOCK_H, BLOCK_T")
        ax.tick_params(axis="x", rotation=45)
    axes[0].set_title("registers", fontsize=10)
    axes[1].set_title("spills", fontsize=10)
    axes[2].set_title("occupancy", fontsize=10)
    h, lab = figure_handles(fig)
    legend_right(fig, h, lab, title="target")
    fig.tight_layout()
    return fig


def fig_pruning(agree, archs, limits: dict):
    """The shared-memory model's estimate against the compiled bytes (both in KB), per target."""
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(archs), figsize=(5.2 * len(archs), 4.6), sharex=True, sharey=True, squeeze=False)
    lim = max(agree.model_bytes.max(), agree.compiled_bytes.max(), *limits.values()) * 1.08 / 1024
    colors = {"keep": "#0072B2", "prune": "#D55E00"}
    markers = {"fits": "o", "over": "X"}
    for ax, arch in zip(axes[0], archs):
        sub = agree[agree.arch == arch]
        for m in ("keep", "prune"):
            for c in ("fits", "over"):
                s = sub[(sub.model == m) & (sub.compiled == c)]
                if len(s):
                    ax.scatter(s.model_bytes / 1024, s.compiled_bytes / 1024, color=colors[m], marker=markers[c],
                               s=40, alpha=0.8, label=f"model {m}s, compiled {c}", linewidths=0)
        ax.plot([0, lim], [0, lim], color="grey", linewidth=1, label="model = compiled")
        block = limits[arch] / 1024
        ax.axhline(block, linestyle=":", color="k")
        ax.axvline(block, linestyle=":", color="k")
        ax.set_xlim(0, lim)
        ax.set_ylim(0, lim)
        ax.set_title(f"{arch}: per-block limit {block:.0f} KB (dotted)", fontsize=10)
        ax.set_xlabel("model estimate (KB)")
        ax.set_ylabel("compiled (KB)" if ax is axes[0][0] else "")
    h, lab = figure_handles(fig)
    legend_right(fig, h, lab)
    fig.tight_layout()
    return fig


def fig_warps(regs, graph, eager):
    """BLOCK_T=16, 4 vs 8 warps: registers per real config, graph-replay time at the batch measured, eager curves.

    regs: resource rows (BLOCK_H, num_warps, PREFETCH, registers); graph: forced-config graph rows
    (heads, num_warps, PREFETCH, median_us); eager: the eager sweep (batch, heads, num_warps, PREFETCH, median_us).
    """
    import matplotlib.pyplot as plt
    variants = [(w, p) for w in (4, 8) for p in (0, 1)]
    pal = {(4, 0): "#9ecae1", (4, 1): "#3182bd", (8, 0): "#fdae6b", (8, 1): "#e6550d"}
    name = {v: f"{v[0]} warps, PREFETCH {v[1]}" for v in variants}
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.3), gridspec_kw={"width_ratios": [1, 1, 1.15]})

    def bars(ax, df, xcol, ycol, xs):
        width = 0.8 / len(variants)
        for j, v in enumerate(variants):
            s = df[(df.num_warps == v[0]) & (df.PREFETCH == v[1])]
            for k, x in enumerate(xs):
                r = s[s[xcol] == x]
                if len(r):
                    ax.bar(k - 0.4 + width * (j + 0.5), float(r[ycol].iloc[0]), width=width * 0.95, color=pal[v],
                           label=name[v])
        ax.set_xticks(range(len(xs)))
        ax.set_xticklabels([str(int(x)) for x in xs])
        ax.set_xlim(-0.5, len(xs) - 0.5)
        ax.grid(axis="x", visible=False)

    bh = sorted(int(x) for x in regs.BLOCK_H.dropna().unique())
    bars(axes[0], regs, "BLOCK_H", "registers", bh)
    axes[0].axhline(255, color="k", linestyle="--", linewidth=1)
    axes[0].text(-0.45, 261, "255: register maximum", va="bottom", fontsize=8)
    axes[0].set_ylim(0, 300)
    axes[0].set_xlabel("BLOCK_H")
    axes[0].set_ylabel("registers per thread")
    axes[0].set_title("registers (sm_90, compiled)", fontsize=10)
    if len(graph):
        hs = sorted(int(x) for x in graph.heads.unique())
        bars(axes[1], graph, "heads", "median_us", hs)
        b = ", ".join(str(int(x)) for x in sorted(graph.batch.unique()))
        axes[1].set_title(f"CUDA-graph replay, batch {b}", fontsize=10)
        axes[1].set_ylim(0, float(graph.median_us.max()) * 1.1)
    else:
        axes[1].text(0.5, 0.5, "no graph-replay A/B in the table", transform=axes[1].transAxes, ha="center")
        axes[1].set_title("CUDA-graph replay", fontsize=10)
    axes[1].set_xlabel("heads (BLOCK_H = min(heads, 64))")
    axes[1].set_ylabel("time per call (us)")
    ax = axes[2]
    if len(eager):
        batches = sorted(eager.batch.unique())
        for (h, w, p), s in eager.groupby(["heads", "num_warps", "PREFETCH"]):
            s = s.groupby("batch", as_index=False).median_us.median()
            gapped_line(ax, [batches.index(x) for x in s.batch], s.median_us, color=pal[(int(w), int(p))],
                        linestyle="-" if h == min(eager.heads) else "--", marker="o" if h == min(eager.heads) else "x",
                        label=f"{int(h)} heads, {name[(int(w), int(p))]}")
        pad_log_limits(ax, eager.median_us)
        readable_log_axis(ax, "y")
        categorical_batch_axis(ax, batches, "batch")
        ax.tick_params(axis="x", labelsize=8)
    ax.set_ylabel("time per call (us)")
    ax.set_title("eager launch vs batch (host-bound: not the kernel's time)", fontsize=10)
    h, lab = figure_handles(fig)
    legend_right(fig, h, lab)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------------------------
# the sm_120 projection (notebook 03): H200 proxy times, the sm_120 memory floor, the lab's occupancy
# ----------------------------------------------------------------------------------------------
PROJECTION_PROVIDER = "auto_portable"  # what "auto" runs on a GPU without wgmma, timed on the H200 (the proxy)
PROJECTION_FLOORS = ("gather_async", "gather")  # the H200's measured floors, drawn beside the projected one


def configs_on_target(kernel: str, heads: int, arch: str = "sm_120") -> list[str]:
    """The config labels ``kernel`` can run with on ``arch`` for a call of ``heads`` heads: what its autotuner's
    prune hook keeps there (budgeted for ``arch`` through ``target_override``, as on that GPU), or its config
    space where it has no autotuner (a Gluon rung with one config). More than one: the autotuner picks on the GPU."""
    from .. import registry
    from ..kernels.tuning import target_override
    spec = registry.get(kernel)
    prune = getattr(spec.jit, "early_config_prune", None)
    if prune is None:
        return [c.label for c in spec.config_space]
    with target_override(arch):
        kept = prune(list(spec.jit.configs), {}, H=heads)
    return [spec.config_cls.from_triton(c).label for c in kept]


def _shape_name(b, h, k, sq=1, extra=0) -> str:
    return f"b{int(b)} h{int(h)} topk{int(k)}" + (f" s_q{int(sq)}" if sq != 1 else "") + (
        f" +{int(extra)} extra" if extra else "")


def _short_config(label: str) -> str:
    """'BLOCK_H=16,BLOCK_T=32,num_warps=4,num_stages=1' -> 'H16 T32 w4 s1'."""
    from .results import parse_config
    c = parse_config(label)
    keys = (("BLOCK_H", "H"), ("BLOCK_T", "T"), ("num_warps", "w"), ("num_stages", "s"))
    return " ".join(f"{short}{c[k]}" for k, short in keys if k in c)


def sm120_projection(headline, lab, target, *, configs=configs_on_target, forced=None):
    """The sm_120 projection, one row per shape of the headline table: a PROJECTION from other measurements, not a
    measurement on sm_120.

    headline: the rows of one headline table (``results.current_rows("headline")``); its shapes, in table order.
    Per shape: (a) the H200 proxy, the graph-replay median (p20, p80) of provider ``auto_portable`` and the kernel its
    rows record (what ``auto`` runs on a GPU without wgmma); (b) the sm_120 memory floor, the decode's bytes (the
    table's ``bytes``, the count its GB/s use: ``accounting.decode_cost``) over ``target.dram_gbps``, beside the
    H200's measured floors of the same table (gather_async, gather) and its bytes over the H200's measured copy rate
    (``hbm_copy_gbps``); (c) the lab's numbers on ``target`` for that kernel's config there (``configs(kernel,
    heads, arch)``: the one its autotuner keeps on sm_120, else every one it picks among, as min-max), from ``lab``
    (the lab's table for ``target.arch``). ``forced``: rows of a forced-config sweep, for the H200 time of that
    config where it was timed forced (``h200_us_of_target_config``), since the H200's autotuner may pick a config
    that sm_120 cannot hold.

    A table without any ok graph row of auto_portable is refused in one line (ValueError); a shape without one gets
    NaN (the figure's "n/a").
    """
    import numpy as np
    import pandas as pd
    if not getattr(target, "dram_gbps", None):
        raise ValueError(f"projection: target {target.arch} has no dram_gbps (workbench/lab/targets.py)")
    ok = headline[(headline["status"] == "ok") & (headline["mode"] == "graph")]
    if "config" in ok.columns:
        ok = ok[ok["config"].fillna("") == ""]
    kernel_col = ok["kernel"].fillna(ok["provider"]) if "kernel" in ok.columns else ok["provider"]
    mine = ok[ok["provider"] == PROJECTION_PROVIDER]
    if mine.empty:
        sources = sorted(set(headline["source"])) if "source" in headline.columns else []
        raise ValueError(f"projection: no ok graph rows of {PROJECTION_PROVIDER} in the headline table "
                         f"{', '.join(sources) or '(no source)'}: it predates the provider; time the headline sweep "
                         "again")
    keys = ["batch", "heads", "topk", "s_q", "extra_topk"]
    shapes = list(dict.fromkeys(tuple(int(v) for v in r) for r in headline[keys].itertuples(index=False)))
    lab_t = lab[lab["arch"] == target.arch] if "arch" in lab.columns else lab
    rows = []
    for shape in shapes:
        at = np.logical_and.reduce([ok[k] == v for k, v in zip(keys, shape)])
        here, kern = ok[at], kernel_col[at]
        p = here[here["provider"] == PROJECTION_PROVIDER]
        nbytes = float(p["bytes"].median()) if len(p) else (float(here["bytes"].median()) if len(here) else np.nan)
        row = dict(shape=_shape_name(*shape), **dict(zip(keys, shape)), bytes=nbytes,
                   kernel=str(kern[p.index].iloc[0]) if len(p) else "",
                   proxy_us=float(p["median_us"].median()) if len(p) else np.nan,
                   proxy_p20_us=float(p["p20_us"].median()) if len(p) else np.nan,
                   proxy_p80_us=float(p["p80_us"].median()) if len(p) else np.nan)
        row["target_floor_us"] = nbytes / (target.dram_gbps * 1e9) * 1e6
        row["target_gbps"] = float(target.dram_gbps)
        row["proxy_over_target_floor"] = row["proxy_us"] / row["target_floor_us"]
        for floor in PROJECTION_FLOORS:
            f = here[kern == floor]
            row[f"h200_{floor}_us"] = float(f["median_us"].median()) if len(f) else np.nan
        copy = pd.to_numeric(here.get("hbm_copy_gbps", pd.Series(dtype=float)), errors="coerce").dropna()
        row["h200_copy_gbps"] = float(copy.median()) if len(copy) else np.nan
        row["h200_copy_floor_us"] = nbytes / (row["h200_copy_gbps"] * 1e9) * 1e6
        labels = configs(row["kernel"], shape[1], target.arch) if row["kernel"] else []
        got = lab_t[(lab_t["kernel"] == row["kernel"]) & lab_t["config"].isin(labels)] if labels else lab_t.iloc[:0]
        row.update(target_configs="; ".join(labels), target_config_count=len(labels),
                   target_config_short=(_short_config(labels[0]) if len(labels) == 1
                                        else f"{len(labels)} configs" if labels else ""),
                   lab_rows=len(got), lab_status="; ".join(sorted(set(got["status"].astype(str)))),
                   mma="; ".join(sorted(set(got["mma"].dropna().astype(str)))) if "mma" in got else "",
                   limiter="; ".join(sorted(set(got["limiter"].dropna().astype(str)))),
                   max_warps_per_sm=int(target.max_warps_per_sm))
        for col in ("registers", "spill_stores", "shared_bytes", "blocks_per_sm", "warps_per_sm", "occupancy"):
            v = pd.to_numeric(got[col], errors="coerce").dropna() if col in got else pd.Series(dtype=float)
            row[f"{col}_min"] = float(v.min()) if len(v) else np.nan
            row[f"{col}_max"] = float(v.max()) if len(v) else np.nan
        row["h200_us_of_target_config"] = np.nan
        if forced is not None and len(labels) == 1 and len(forced):
            fz = forced[(forced["status"] == "ok") & (forced["mode"] == "graph")
                        & (forced["kernel"].fillna(forced["provider"]) == row["kernel"])
                        & (forced["config"].fillna("") == labels[0])]
            fz = fz[np.logical_and.reduce([fz[k] == v for k, v in zip(keys, shape)])]
            row["h200_us_of_target_config"] = float(fz["median_us"].median()) if len(fz) else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def fig_projection(proj, target, *, h200: str = "H200"):
    """The sm_120 projection (:func:`sm120_projection`), labelled as one: left, per shape, the H200 proxy time of
    what auto runs without wgmma (whiskers p20-p80; the kernel under the shape), the sm_120 memory floor (hatched:
    bytes over the spec bandwidth) and the H200's measured floors beside it; right, the lab's resident warps per SM
    on sm_120 for that kernel's config (of the SM's maximum), with its limiter. A shape without a proxy row: "n/a"."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    n = len(proj)
    fig, (ax, occ) = plt.subplots(1, 2, figsize=(max(12.0, 3.2 * n + 2.5), 5.8),
                                  gridspec_kw={"width_ratios": [2.3, 1]})
    gbps = f"{target.dram_gbps:,.0f}"
    copy = proj["h200_copy_gbps"].dropna()
    bars = [("proxy_us", PROVIDER_COLORS[PROJECTION_PROVIDER], None,
             f"{h200} proxy: what auto runs without wgmma, timed on the {h200} (graph replay, whiskers p20-p80)"),
            ("target_floor_us", "#CC79A7", "//",
             f"{target.arch} memory floor, PROJECTED: the decode's bytes / {gbps} GB/s ({target.example_gpu} spec)"),
            ("h200_gather_async_us", "#333333", None, f"{h200} gather floor, cp.async (gather_async, measured)"),
            ("h200_gather_us", "#888888", None, f"{h200} gather floor (gather, measured)"),
            ("h200_copy_floor_us", "#CCCCCC", "..",
             f"{h200} bytes / its measured copy rate" + (f" ({copy.median():,.0f} GB/s)" if len(copy) else ""))]
    bars = [b for b in bars if b[0] in proj.columns and proj[b[0]].notna().any()]
    width = 0.84 / len(bars)
    forced = proj["h200_us_of_target_config"] if "h200_us_of_target_config" in proj.columns else None
    forced_kernel = forced is not None and forced.notna().any()
    values = proj[[b[0] for b in bars] + ["proxy_p80_us"] + (["h200_us_of_target_config"] if forced_kernel else [])
                  ].to_numpy(float)
    finite = values[np.isfinite(values) & (values > 0)]
    lo, hi = (finite.min() / 2.5, finite.max() * 4.0) if len(finite) else (0.1, 10.0)
    for i, r in enumerate(proj.itertuples(index=False)):
        for j, (col, color, hatch, _) in enumerate(bars):
            x = i - 0.42 + width * (j + 0.5)
            v = getattr(r, col)
            if not np.isfinite(v):
                ax.text(x, lo * 1.15, "n/a", ha="center", va="bottom", rotation=90, fontsize=7, color="grey")
                continue
            ax.bar(x, v - lo, bottom=lo, width=width * 0.9, color=color, hatch=hatch, edgecolor="white",
                   linewidth=0.5)
            top = v
            if col == "proxy_us" and np.isfinite(r.proxy_p20_us) and np.isfinite(r.proxy_p80_us):
                ax.errorbar(x, v, yerr=[[v - r.proxy_p20_us], [r.proxy_p80_us - v]], fmt="none", ecolor="k",
                            elinewidth=1, capsize=2)
                top = max(v, r.proxy_p80_us)
            text = f"{v:.0f}" if v >= 30 else f"{v:.1f}" if v >= 1 else f"{v:.2f}"
            if col == "proxy_us" and forced_kernel and np.isfinite(r.h200_us_of_target_config):
                f = r.h200_us_of_target_config  # the config sm_120 keeps, timed forced on the H200
                ax.plot([x], [f], marker="_", markersize=14, markeredgewidth=2.2, color="k", linestyle="none")
                ax.text(x + width * 0.6, f, f"{f:.0f}: its {target.arch} config" if f >= 30 else
                        f"{f:.1f}: its {target.arch} config", ha="left", va="center", fontsize=7, zorder=5,
                        bbox=dict(facecolor="white", edgecolor="none", alpha=0.85, pad=0.6))
                top = max(top, f)
            ax.text(x, top * 1.12, text, ha="center", va="bottom", rotation=90, fontsize=7, zorder=5,
                    bbox=dict(facecolor="white", edgecolor="none", alpha=0.85, pad=0.6))
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    readable_log_axis(ax, "y")
    ax.set_xticks(range(n))
    ax.set_xticklabels([f"{r.shape}\nruns {r.kernel}" if r.kernel else f"{r.shape}\n(no proxy row)"
                        for r in proj.itertuples(index=False)], fontsize=8)
    ax.set_xlim(-0.5, n - 0.5)
    ax.grid(axis="x", visible=False)
    ax.set_xlabel("headline shape (s_q = 1, pages of 256) and the kernel auto runs there without wgmma")
    ax.set_ylabel("time per call (us, log)")
    ax.set_title(f"PROJECTION for {target.arch}: {h200} times and the {target.arch} memory floor", fontsize=10)
    most = int(target.max_warps_per_sm)
    for i, r in enumerate(proj.itertuples(index=False)):
        lo_w, hi_w = r.warps_per_sm_min, r.warps_per_sm_max
        if not np.isfinite(hi_w):
            occ.text(i, most * 0.03, "n/a", ha="center", va="bottom", rotation=90, fontsize=7, color="grey")
            continue
        occ.bar(i, hi_w, width=0.6, color=PROVIDER_COLORS[PROJECTION_PROVIDER], edgecolor="white", linewidth=0.5)
        warps = f"{lo_w:.0f}-{hi_w:.0f}" if lo_w != hi_w else f"{hi_w:.0f}"
        occ.text(i, hi_w + most * 0.03, f"{warps} of {most} warps, limiter: {r.limiter}", ha="center",
                 va="bottom", rotation=90, fontsize=7, zorder=5,
                 bbox=dict(facecolor="white", edgecolor="none", alpha=0.85, pad=0.6))
    occ.axhline(most, color="k", linestyle="--", linewidth=1)
    occ.set_ylim(0, most * 1.12)
    occ.set_xticks(range(n))
    occ.set_xticklabels(["\n".join([r.shape.replace(" topk", "\ntopk"), r.kernel, r.target_config_short]).rstrip()
                         for r in proj.itertuples(index=False)], fontsize=7)
    occ.set_xlim(-0.5, n - 0.5)
    occ.grid(axis="x", visible=False)
    occ.set_xlabel(f"shape, kernel and its {target.arch} config (lab)")
    occ.set_ylabel(f"resident warps per SM on {target.arch}")
    occ.set_title(f"{target.arch} occupancy (cross-compiled, dashed: the SM's {most} warps)", fontsize=10)
    handles = [Patch(facecolor=c, hatch=h, edgecolor="white") for _, c, h, _ in bars]
    names = [b[3] for b in bars]
    if forced_kernel:
        handles.append(Line2D([], [], marker="_", markersize=14, markeredgewidth=2.2, color="k", linestyle="none"))
        names.append(f"{h200} time of the config {target.arch} keeps, forced (where the H200 autotuner picked "
                     f"one that {target.arch} cannot hold)")
    fig.tight_layout()
    legend_below(fig, handles, names, ncol=1,
                 title="above each bar: time in us; a PROJECTION from H200 measurements, the lab and the spec",
                 fontsize=8, title_fontsize=8)
    return fig
