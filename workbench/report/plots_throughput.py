"""Notebook 04's figures: time against batch, production shapes, speed-ups, the roofline, the batch
model and the host overhead against its goals.

The shared look, save helpers and provenance notes are in :mod:`workbench.report.figures`.
"""
from __future__ import annotations

import numpy as np

from .figures import (MODE_TITLES, POOR_R2, PROVIDER_COLORS, PROVIDER_LABELS, PROVIDER_ORDER, PROVIDER_STYLE, _dedupe,
                      _fmt_num, categorical_batch_axis, figure_handles, gapped_line, legend_below, legend_right,
                      pad_log_limits, providers_in, readable_log_axis)


# ----------------------------------------------------------------------------------------------
# throughput (notebook 04)
# ----------------------------------------------------------------------------------------------
def _median_by(df, keys):
    return df.groupby(keys, as_index=False)["median_us"].median()


def fig_time_vs_batch(rows, *, mode: str, batches=None):
    """Time against batch, one panel per (topk, heads), one line per provider, for one timing mode."""
    import matplotlib.pyplot as plt
    rows = rows[rows["mode"] == mode]
    batches = sorted(set(batches if batches is not None else rows["batch"]))
    topks = sorted(rows["topk"].unique())
    heads = sorted(rows["heads"].unique())
    fig, axes = plt.subplots(len(topks), len(heads), figsize=(3.3 * len(heads), 2.9 * len(topks)), squeeze=False,
                             sharex=True)
    med = _median_by(rows, ["provider", "topk", "heads", "batch"])
    for r, k in enumerate(topks):
        for c, h in enumerate(heads):
            ax = axes[r, c]
            sub = med[(med.topk == k) & (med.heads == h)]
            for p in providers_in(sub):
                s = sub[sub.provider == p]
                gapped_line(ax, [batches.index(b) for b in s.batch], s.median_us, label=PROVIDER_LABELS[p],
                            color=PROVIDER_COLORS[p], **PROVIDER_STYLE.get(p, {}))
            if sub.empty:
                ax.text(0.5, 0.5, "not measured", transform=ax.transAxes, ha="center", va="center", color="grey")
            else:
                pad_log_limits(ax, sub.median_us)
                readable_log_axis(ax, "y")
            ax.set_title(f"topk {k}, {h} heads", fontsize=10)
            categorical_batch_axis(ax, batches, "batch" if r == len(topks) - 1 else "")
            ax.set_ylabel("time per call (us)" if c == 0 else "")
            ax.tick_params(axis="x", labelsize=8, rotation=0)
    h, lab = figure_handles(fig)
    legend_right(fig, h, lab, title=MODE_TITLES[mode])
    fig.tight_layout()
    return fig


def fig_production(rows, panels, *, batches=None):
    """Rows: timing mode (graph, eager); columns: the given (sweep, heads, title) panels."""
    import matplotlib.pyplot as plt
    batches = sorted(set(batches if batches is not None else rows["batch"]))
    modes = ["graph", "eager"]
    # wide panels: the legend of every provider (floors included) takes a fixed width on the right
    fig, axes = plt.subplots(2, len(panels), figsize=(5.6 * len(panels), 6.2), squeeze=False, sharex=True)
    for r, mode in enumerate(modes):
        for c, (sweep, h, title) in enumerate(panels):
            ax = axes[r, c]
            sub = _median_by(rows[(rows.sweep == sweep) & (rows.heads == h) & (rows["mode"] == mode)],
                             ["provider", "batch"])
            for p in providers_in(sub):
                s = sub[sub.provider == p]
                gapped_line(ax, [batches.index(b) for b in s.batch], s.median_us, label=PROVIDER_LABELS[p],
                            color=PROVIDER_COLORS[p], **PROVIDER_STYLE.get(p, {}))
            if sub.empty:
                ax.text(0.5, 0.5, f"no {mode} timings in the table", transform=ax.transAxes, ha="center",
                        va="center", color="grey")
                ax.set_yticks([])
            else:
                pad_log_limits(ax, sub.median_us)
                readable_log_axis(ax, "y")
            ax.set_title(f"{title}\n{mode}" + (" (host-bound)" if mode == "eager" else " replay"), fontsize=10)
            categorical_batch_axis(ax, batches, "batch" if r == 1 else "")
            ax.tick_params(axis="x", labelsize=8)
            ax.set_ylabel("time per call (us)" if c == 0 else "")
    h, lab = figure_handles(fig)
    legend_right(fig, h, lab, title="provider")
    fig.tight_layout()
    return fig


def fig_speedups(vs_fm, vs_simt, *, batches=None, ours: str = "mma", simt_runs: str = "one run"):
    """Speed of one of our providers (``ours``) relative to FlashMLA by heads (graph and eager panels) and over SIMT.

    The frames hold the columns ``flashmla time / <ours> time`` and ``simt time / <ours> time``; the legend
    names ``ours`` by its label (the batch sweeps only have the seed, "mma"). ``simt_runs`` says under the SIMT
    panel's title where its pairs came from (e.g. SIMT's table, when it is another run's).
    """
    import matplotlib.pyplot as plt
    import seaborn as sns
    col = f"flashmla time / {ours} time"
    batches = sorted(set(batches if batches is not None else vs_fm["batch"]))
    heads = sorted(vs_fm["heads"].unique())
    colors = dict(zip(heads, sns.color_palette("viridis", len(heads))))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4), gridspec_kw={"width_ratios": [1.2, 1.2, 0.9]})
    for ax, mode in zip(axes[:2], ["graph", "eager"]):
        sub = vs_fm[vs_fm["mode"] == mode]
        for h in heads:
            s = sub[sub.heads == h]
            if len(s):
                gapped_line(ax, [batches.index(b) for b in s.batch], s[col], color=colors[h], label=f"{h} heads")
        ax.axhline(1, color="k", linestyle="--", linewidth=1)
        ax.text(0.02, 1, " FlashMLA's speed", transform=ax.get_yaxis_transform(), va="bottom", fontsize=8)
        ax.set_ylim(0, max(1.15, float(sub[col].max()) * 1.1 if len(sub) else 1.15))
        categorical_batch_axis(ax, batches, "batch")
        ax.tick_params(axis="x", labelsize=8)
        ax.set_ylabel("speed vs FlashMLA (1 = equal)")
        ax.set_title(f"vs FlashMLA, topk 2048: {mode}" + (" (host-bound)" if mode == "eager" else " replay"),
                     fontsize=10)
        if sub.empty:
            ax.text(0.5, 0.5, f"no {mode} pairs", transform=ax.transAxes, ha="center", color="grey")
    ax = axes[2]
    if len(vs_simt):
        sc = f"simt time / {ours} time"
        vs = vs_simt.sort_values("batch")
        bars = ax.bar([str(int(b)) for b in vs.batch], vs[sc], color=PROVIDER_COLORS.get(ours, "grey"))
        ax.bar_label(bars, fmt="%.0fx", fontsize=9)
        ax.set_ylim(0, float(vs[sc].max()) * 1.15)
        modes = ", ".join(sorted(vs_simt["mode"].unique()))
        ax.set_title(f"over per-head SIMT, 64 heads ({modes})\n{simt_runs}", fontsize=9)
    else:
        ax.text(0.5, 0.5, "no SIMT timings", transform=ax.transAxes, ha="center", color="grey")
        ax.set_title("over per-head SIMT", fontsize=10)
    ax.set_xlabel("batch")
    ax.set_ylabel("speed-up (SIMT time / our time)")
    h, lab = _dedupe(*axes[0].get_legend_handles_labels())
    if not h:
        h, lab = _dedupe(*axes[1].get_legend_handles_labels())
    legend_below(fig, h, lab, ncol=len(heads), title=f"{PROVIDER_LABELS.get(ours, ours)} at")
    fig.tight_layout()
    return fig


def _decade_ticks(lo, hi):
    cands = [m * 10.0 ** e for e in range(-3, 6) for m in (1, 2, 5)]
    t = [c for c in cands if lo <= c <= hi]
    return t if len(t) >= 2 else [lo, hi]


def fig_roofline(rf, hbm_gbps: float, gemm_tflops: float):
    """Achieved TFLOP/s against arithmetic intensity under the measured copy and GEMM ceilings, per mode."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
    modes = [m for m in ("graph", "eager") if m in set(rf["mode"])] or ["graph"]
    fig, axes = plt.subplots(1, len(modes), figsize=(6 * len(modes), 4.6), sharey=True, squeeze=False)
    ridge = gemm_tflops * 1e12 / (hbm_gbps * 1e9)
    lo = min(float(rf.intensity.min()) / 1.6, ridge / 4) if len(rf) else ridge / 10
    hi = max(float(rf.intensity.max()) * 1.6, ridge * 3) if len(rf) else ridge * 10
    i = np.logspace(np.log10(lo), np.log10(hi), 200)
    ceiling = np.minimum(gemm_tflops, hbm_gbps * i / 1000)
    heads = sorted(rf["heads"].unique())
    markers = dict(zip(heads, "os^DvP*X"))
    for ax, mode in zip(axes[0], modes):
        ax.plot(i, ceiling, color="k", linewidth=1.5,
                label=f"ceiling: {hbm_gbps:,.0f} GB/s copy, {gemm_tflops:,.0f} TFLOP/s GEMM")
        ax.axvline(ridge, color="grey", linestyle=":", linewidth=1)
        ax.text(ridge, 0.02, f" ridge {ridge:.0f}", transform=ax.get_xaxis_transform(), fontsize=8, color="grey")
        sub = rf[rf["mode"] == mode]
        for p in providers_in(sub):
            for h in heads:
                s = sub[(sub.provider == p) & (sub.heads == h)]
                if len(s):
                    ax.scatter(s.intensity, s.tflops, color=PROVIDER_COLORS[p], marker=markers[h], s=28, alpha=0.8,
                               linewidths=0, label=PROVIDER_LABELS[p])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.xaxis.set_major_locator(FixedLocator(_decade_ticks(lo, hi)))
        ax.xaxis.set_major_formatter(FuncFormatter(_fmt_num))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("arithmetic intensity (FLOP / byte)")
        ax.set_ylabel("achieved TFLOP/s" if ax is axes[0][0] else "")
        ax.set_title(MODE_TITLES[mode], fontsize=10)
    ys = np.concatenate([rf.tflops.to_numpy(float), [gemm_tflops]])
    ys = ys[np.isfinite(ys) & (ys > 0)]
    axes[0][0].set_ylim(ys.min() / 1.5, ys.max() * 1.5)
    readable_log_axis(axes[0][0], "y")
    h, lab = figure_handles(fig)
    from matplotlib.lines import Line2D
    h += [Line2D([], [], color="grey", marker=markers[x], linestyle="") for x in heads]
    lab += [f"{x} heads" for x in heads]
    legend_right(fig, h, lab)
    fig.tight_layout()
    return fig


def fig_batch_model(show):
    """Fixed and per-request cost of ``time = fixed + per_request * batch``, r² written on every bar."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    show = show.copy()
    show["group"] = show.provider.map(PROVIDER_LABELS).fillna(show.provider) + ", " + show["mode"]
    groups = [g for p in PROVIDER_ORDER for m in ("graph", "eager")
              for g in [f"{PROVIDER_LABELS[p]}, {m}"] if g in set(show.group)]
    heads = sorted(show.heads.unique())
    # the r² labels stand on bars of 0.8 / groups of a heads slot: wider with more groups, so that they never touch
    fig, axes = plt.subplots(1, 2, figsize=(max(13.0, 1.45 * len(groups)), 4.4))
    width = 0.8 / max(1, len(groups))
    colors = {}
    for j, g in enumerate(groups):
        p = show[show.group == g].provider.iloc[0]
        colors[g] = PROVIDER_COLORS.get(p, "grey")
    for ax, col, name in ((axes[0], "fixed_us", "fixed part (us)"), (axes[1], "per_request_us", "per request (us)")):
        vals = []
        for j, g in enumerate(groups):
            s = show[show.group == g].set_index("heads")
            for k, h in enumerate(heads):
                if h not in s.index:
                    continue
                v, r2 = float(s.loc[h, col]), float(s.loc[h, "r2"])
                x = k - 0.4 + width * (j + 0.5)
                eager = g.endswith("eager")
                poor = r2 < POOR_R2
                ax.bar(x, max(v, 1e-3), width=width * 0.95, color=colors[g], alpha=0.45 if eager else 0.95,
                       hatch="///" if poor else None, edgecolor="white" if not poor else "k", linewidth=0.4)
                ax.text(x, max(v, 1e-3) * 1.08, f"{r2:.2f}", rotation=90, ha="center", va="bottom", fontsize=6.5)
                vals.append(max(v, 1e-3))
        if vals:
            ax.set_ylim(min(vals) / 2, max(vals) * 6)
        readable_log_axis(ax, "y")
        ax.set_xticks(range(len(heads)))
        ax.set_xticklabels([str(h) for h in heads])
        ax.set_xlim(-0.5, len(heads) - 0.5)
        ax.grid(axis="x", visible=False)
        ax.set_xlabel("heads")
        ax.set_ylabel(name)
        ax.set_title(f"{name.split(' (')[0]}; number above each bar: r² of the fit", fontsize=10)
    handles = [Patch(facecolor=colors[g], alpha=0.45 if g.endswith("eager") else 0.95) for g in groups]
    labels = list(groups)
    handles.append(Patch(facecolor="white", edgecolor="k", hatch="///"))
    labels.append(f"hatched: poor fit, r² < {POOR_R2}")
    legend_right(fig, handles, labels, title="provider, mode (pale: eager)")
    fig.tight_layout()
    return fig


OVERHEAD_BOUNDS = {"plain call": 15.0, "call through a plan": 10.0}  # us: the engine's goals for host overhead
OVERHEAD_CLIP = 4.0  # the overhead figure's axis ends at this many times its median bar (or its highest goal)


def fig_overhead(df, *, bounds: dict | None = None):
    """Host overhead per call: bars of eager_idle minus graph (median, whiskers p20-p80), a group per shape, a bar
    per provider, the launch floors (empty kernels launched as a plan launches them) beside the decodes.

    df: bench rows (``load_bench`` or ``bench.rows_frame``); only ok rows of mode "overhead" (the bench's
    ``overhead`` sweep) are drawn, several rows of one provider and shape as their medians. bounds: name -> us,
    each a dashed line (default OVERHEAD_BOUNDS; {} for none).
    """
    bounds = OVERHEAD_BOUNDS if bounds is None else bounds
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    rows = df[(df["status"] == "ok") & (df["mode"] == "overhead")]
    if not len(rows):
        raise ValueError("no ok 'overhead' rows to draw (python -m workbench bench --sweep overhead makes them)")
    keys = ["batch", "heads", "topk", "s_q", "extra_topk"]
    med = rows.groupby(keys + ["provider"])[["median_us", "p20_us", "p80_us"]].median()
    shapes = sorted({k[:-1] for k in med.index})
    known = ["auto", "auto+plan", "auto+compiled", "flashmla", "launch_floor", "launch_floor2"]
    provs = [p for p in known if p in set(rows.provider)] + sorted(set(rows.provider) - set(known))
    labels = {"auto+plan": "workbench default through a plan (auto+plan)",
              "auto+compiled": "the torch op in a compiled module (auto+compiled)",
              "launch_floor": "host floor: one empty launch", "launch_floor2": "host floor: two empty launches"}
    colors = {p: PROVIDER_COLORS.get(p.split("+")[0], "#999999") for p in provs}
    colors.update({"launch_floor": "#BBBBBB", "launch_floor2": "#777777"})
    hatches = {p: {"plan": "//", "compiled": ".."}.get(p.partition("+")[2]) for p in provs}

    def shape_label(b, h, k, sq, extra):
        return f"b{b} h{h} topk{k}" + (f" s_q{sq}" if sq != 1 else "") + (f" +{extra} extra" if extra else "")
    # at least 8 inches: the legend below, two names a line, fits the width
    fig, ax = plt.subplots(figsize=(max(8.0, 1.6 + 1.3 * len(shapes) * max(len(provs), 2) / 2), 4.3))
    width = 0.8 / len(provs)
    lows, highs = [0.0], [max(bounds.values(), default=0.0)]
    # a bar far above the others (the compiled op's ~100-200 us) would flatten the goals and the floors to a few
    # pixels: the axis stops at OVERHEAD_CLIP times the median bar (or the highest goal) and such a bar is cut there,
    # its number written at the cut
    clip = OVERHEAD_CLIP * max(float(np.median(np.abs(med.median_us))), max(bounds.values(), default=0.0))
    cut = False
    top = clip if (med.median_us > clip).any() else float("inf")  # where the axis will stop
    for i, shape in enumerate(shapes):
        for j, p in enumerate(provs):
            x = i - 0.4 + width * (j + 0.5)
            if shape + (p,) not in med.index:
                ax.text(x, 0, "n/a", ha="center", va="bottom", fontsize=7, color="grey")
                continue
            m, lo, hi = med.loc[shape + (p,)]
            text = f"{m:.0f}" if abs(m) >= 30 else f"{m:.1f}"
            if m > clip:
                cut = True
                ax.bar(x, clip, width=width * 0.9, color=colors[p], hatch=hatches[p], edgecolor="white",
                       linewidth=0.5)
                ax.text(x, 0.97 * clip, f"{text}\n(cut)", ha="center", va="top", fontsize=7.5, zorder=5,
                        bbox=dict(facecolor="white", edgecolor="none", alpha=0.85, pad=0.6))
                highs.append(clip)
                lows.append(0.0)
                continue
            ax.bar(x, m, width=width * 0.9, color=colors[p], hatch=hatches[p], edgecolor="white", linewidth=0.5)
            ax.errorbar(x, m, yerr=[[m - lo], [hi - m]], fmt="none", ecolor="k", elinewidth=1, capsize=3)
            # a whisker that runs past the cut axis takes its number inside the axis, as a cut bar does
            y, va = (0.97 * top, "top") if max(m, hi) > 0.9 * top else (max(m, hi), "bottom")
            ax.text(x, y, text, ha="center", va=va,
                    fontsize=7.5, zorder=5, bbox=dict(facecolor="white", edgecolor="none", alpha=0.85, pad=0.6))
            lows.append(min(m, lo))
            highs.append(max(m, hi))
    ax.axhline(0, color="k", linewidth=0.8)
    bound_styles = dict(zip(bounds, ("--", ":", "-.")))
    for name, us in bounds.items():
        ax.axhline(us, color="#B00020", linestyle=bound_styles[name], linewidth=1.2)
    span = max(highs) - min(lows)
    ax.set_ylim(min(lows) - 0.05 * span if min(lows) < 0 else 0, clip if cut else max(highs) + 0.15 * span)
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels([shape_label(*s) for s in shapes])
    ax.set_xlim(-0.5, len(shapes) - 0.5)
    ax.grid(axis="x", visible=False)
    ax.set_xlabel("shape")
    ax.set_ylabel("host overhead per call (us)\neager_idle minus graph")
    handles = [Patch(facecolor=colors[p], hatch=hatches[p], edgecolor="white") for p in provs]
    names = [labels.get(p, PROVIDER_LABELS.get(p, p)) for p in provs]
    for name, us in bounds.items():
        handles.append(Line2D([], [], color="#B00020", linestyle=bound_styles[name], linewidth=1.2))
        names.append(f"goal for a {name} ({us:g} us)")
    fig.tight_layout()
    # below, not beside: the names are longer than a narrow figure is wide, and a legend to the right left the
    # bars in a corner of the image
    legend_below(fig, handles, names, ncol=2, title="provider (whiskers: p20-p80)" + (
        f"; bars above {clip:.0f} us are cut at the top, their median written there" if cut else ""))
    return fig


def next_power_of_two_ratios(rows, provider: str = "auto"):
    """Per batch and head count that is not a power of two: ``provider``'s time over its time at the next power of
    two in the same table (issue 25: <= 1 is the goal), with both times."""
    import pandas as pd
    med = _median_by(rows[rows.provider == provider], ["batch", "heads"]).set_index(["batch", "heads"]).median_us
    out = []
    for (b, h), t in med.items():
        if h & (h - 1) == 0:
            continue
        up = 1 << (int(h) - 1).bit_length()
        if (b, up) in med.index:
            out.append(dict(provider=provider, batch=b, heads=h, us=t, next_pow2=up, next_pow2_us=med[(b, up)],
                            ratio=t / med[(b, up)]))
    return pd.DataFrame(out, columns=["provider", "batch", "heads", "us", "next_pow2", "next_pow2_us", "ratio"])


def fig_heads(rows):
    """Time against head count, one panel per batch, one line per provider; the head axis is categorical (the
    measured counts, evenly spaced), powers of two shaded, and each odd count of "auto" labelled with its time over
    the next power of two's."""
    import matplotlib.pyplot as plt
    batches = sorted(rows["batch"].unique())
    heads = sorted(rows["heads"].unique())
    fig, axes = plt.subplots(1, len(batches), figsize=(5.2 * len(batches), 3.8), squeeze=False)
    med = _median_by(rows, ["provider", "batch", "heads"])
    ratios = next_power_of_two_ratios(rows)
    for c, b in enumerate(batches):
        ax = axes[0, c]
        sub = med[med.batch == b]
        for i, h in enumerate(heads):
            if h & (h - 1) == 0:
                ax.axvspan(i - 0.4, i + 0.4, color="0.92", zorder=0, lw=0)
        for p in providers_in(sub):
            s = sub[sub.provider == p]
            gapped_line(ax, [heads.index(h) for h in s.heads], s.median_us, label=PROVIDER_LABELS[p],
                        color=PROVIDER_COLORS[p], **PROVIDER_STYLE.get(p, {}))
        pad_log_limits(ax, sub.median_us, pad=1.4)
        readable_log_axis(ax, "y")
        for r in ratios[ratios.batch == b].itertuples():
            ax.annotate(f"{r.ratio:.2f}x\nh{r.next_pow2}", (heads.index(r.heads), r.us), textcoords="offset points",
                        xytext=(0, -11), ha="center", va="top", fontsize=7, color=PROVIDER_COLORS["auto"],
                        bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.85))
        categorical_batch_axis(ax, heads, "heads (shaded: powers of two)")
        ax.set_title(f"batch {b}, topk {int(rows.topk.iloc[0])}", fontsize=10)
        ax.set_ylabel("time per call (us)" if c == 0 else "")
    h, lab = figure_handles(fig)
    legend_below(fig, h, lab, ncol=3)
    fig.tight_layout()
    return fig
