"""One look for every figure, and the figures themselves.

Theme and save helpers (PNG at 200 dpi + SVG, byte-identical from run to run; tables as CSV beside
them), the provenance line every figure drawn from ``data/`` carries, and one function per figure
(``fig_*``) that takes plain data frames and returns a matplotlib figure. The notebooks call these;
``tests/test_figures.py`` renders each one on small data and checks labels, legends and bytes.

Conventions: legends sit outside the axes (they never cover data); time axes are log with plain
number ticks; batch axes are categorical over the measured batch sizes and lines join only
neighbouring measured sizes (no interpolation across a missing batch); CUDA-graph replay is the
kernel's time, eager timings (host-bound at small batch) are drawn in their own labelled panels.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

THEME = dict(style="whitegrid", context="notebook", palette="colorblind")
PROVIDER_LABELS = {
    "auto": "workbench default (auto)",
    "mma": "seed MMA kernel",
    "flashmla": "FlashMLA",
    "gather": "gather floor (reads the bytes, no math)",
    "gather_async": "gather floor, cp.async (the deepest load path)",
    "auto_portable": "portable default (what auto runs without wgmma)",
    "simt": "per-head SIMT kernel",
    "reference": "PyTorch reference",
}
PROVIDER_ORDER = list(PROVIDER_LABELS)
PROVIDER_COLORS = {"auto": "#0072B2", "mma": "#56B4E9", "flashmla": "#E69F00", "gather": "#4D4D4D", "simt": "#009E73",
                   "reference": "#CC79A7", "gather_async": "#000000", "auto_portable": "#D55E00"}
PROVIDER_STYLE = {"gather": dict(linestyle=":", marker="s"), "gather_async": dict(linestyle="-.", marker="v"),
                  "auto": dict(marker="D", markersize=7)}
# The default kernel: provider "auto" (registry.auto_kernel: a Gluon rung on sm_90). Tables before 81746ba time the
# seed as provider "mma"; the figures call that "seed MMA kernel", never the default.
DEFAULT_PROVIDER = "auto"
LADDER_FLOORS = ("gather", "gather_async")  # the floor probes the ladder figures draw as lines, where timed
DEFAULT_FALLBACK = ("wgmma",)  # what "auto" ran on the H200 before the 4-lane rungs, timed by name in old tables
# One colour per kernel (optimisation-ladder rungs and the correctness tables' impl column).
KERNEL_COLORS = {"mma": "#56B4E9", "tile512": "#D55E00", "tile512_bf16dq": "#CC79A7", "tile512_3d": "#8C6D31",
                 "wgmma": "#0072B2", "wgmma_4lane": "#332288", "wgmma_rope": "#882255", "wgmma_2cta": "#44AA99",
                 "wgmma_headwarps": "#117733", "wgmma_xchg": "#DDAA33", "wgmma_f16": "#AA4499",
                 "wgmma_f16_2cta": "#999933", "wgmma_ws": "#661100", "auto": "#0072B2", "simt": "#009E73"}


def kernel_colors(names) -> dict:
    """A colour per kernel name: its own from KERNEL_COLORS, else (a rung registered later, with no edit here)
    the next tab20 colour no kernel in ``names`` uses yet, so no two bars of one figure share a colour."""
    import seaborn as sns
    out = {k: KERNEL_COLORS[k] for k in names if k in KERNEL_COLORS}
    spare = iter(c for c in sns.color_palette("tab20").as_hex() if c not in set(out.values()))
    for k in names:
        if k not in out:
            out[k] = next(spare, "grey")
    return out


MODE_TITLES = {"graph": "CUDA-graph replay (the kernel's time)",
               "eager": "eager launch (host-bound below ~32 requests)"}
POOR_R2 = 0.8
SEED = 0


# ----------------------------------------------------------------------------------------------
# theme, saving, provenance
# ----------------------------------------------------------------------------------------------
def set_theme():
    import matplotlib
    import seaborn as sns
    sns.set_theme(**THEME)
    matplotlib.rcParams.update({"figure.dpi": 100, "savefig.bbox": "tight", "axes.titleweight": "bold",
                                "svg.hashsalt": "mla-workbench", "legend.frameon": True})


def _extents(fig, renderer):
    """Figure-fraction (ymin, ymax) over every axes and figure legend."""
    inv = fig.transFigure.inverted()
    boxes = [ax.get_tightbbox(renderer) for ax in fig.axes if ax.get_visible()]
    boxes += [lg.get_window_extent(renderer) for lg in fig.legends]
    ys = [inv.transform(b.corners())[:, 1] for b in boxes if b is not None]
    if not ys:
        return 0.05, 0.95
    return min(y.min() for y in ys), max(y.max() for y in ys)


def out_folder(out_dir) -> Path:
    """A notebook's ``out_dir`` as a Path; refused (``pipeline.RefusedOutput``, one line in the notebook) when it is
    in the repository's data/ or figures/, whichever way the notebook is run: only publishing adds to those.
    The notebooks call it first, before they compute anything; ``save_figure`` and ``save_table`` call it too."""
    from .pipeline import refuse_published
    return refuse_published(out_dir, "out_dir")


def save_figure(fig, name: str, out_dir, *, title: str | None = None, note: str | None = None) -> list[Path]:
    """Save ``fig`` as out_dir/name.png (200 dpi) and .svg; returns the paths.

    ``title`` goes above every axes title and label; ``note`` (the data's provenance, see
    :func:`bench_provenance`) below everything, in red when it says STALE. The files carry no date
    or software stamp and SVG ids are salted with a constant, so the same figure gives the same bytes.
    """
    out = out_folder(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    if title:
        _, top = _extents(fig, renderer)
        fig.suptitle(title, fontweight="bold", y=top + 0.01, va="bottom")
    if note:
        bottom, _ = _extents(fig, renderer)
        width_in = fig.get_figwidth()
        wrapped = "\n".join(textwrap.wrap(note, width=max(60, int(width_in * 15))))
        fig.text(0.01, bottom - 0.015, wrapped, ha="left", va="top", fontsize=8,
                 color="#B00020" if "STALE" in note else "#444444")
    paths = [out / f"{name}.png", out / f"{name}.svg"]
    fig.savefig(paths[0], dpi=200, bbox_inches="tight", metadata={"Software": None})
    fig.savefig(paths[1], bbox_inches="tight", metadata={"Date": None, "Creator": None})
    return paths


def save_table(df, name: str, out_dir) -> Path:
    out = out_folder(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.csv"
    df.to_csv(path, index=False)
    return path


def gpu_label(df) -> str:
    """'NVIDIA H200 (sm_90), driver ..., triton ...' from a results table's provenance columns."""
    r = df.iloc[0]
    return f"{r['gpu']} ({r['capability']}), driver {r['driver']}, triton {r['triton']}"


def _short(commit) -> str:
    c = str(commit)
    return c[:7] + ("+dirty" if c.endswith("+dirty") else "")


def _provenance_text(items) -> str:
    """items: (commit, date, source, stale) tuples -> one sentence per kind of verdict, STALE first."""
    def where(commit, date, source):
        inside = ", ".join(x for x in (source, str(date)[:10] if date else "") if x)
        return f"{_short(commit)} ({inside})" if inside else _short(commit)

    groups = {True: [], False: [], None: []}
    for commit, date, source, stale in items:
        w = where(commit, date, source)
        if w not in groups[stale]:
            groups[stale].append(w)
    tail = {True: "the kernel sources (workbench/kernels) changed since, so these numbers describe older code.",
            False: "the kernel sources are unchanged since.",
            None: "git cannot tell whether the kernel sources changed since."}
    out = []
    for key in (True, False, None):
        if groups[key]:
            commits = " and ".join(groups[key])
            s = "commits" if len(groups[key]) > 1 else "commit"
            out.append(("STALE: measured at " if key is True else "Measured at ") + f"{s} {commits}; {tail[key]}")
    return " ".join(out)


def bench_provenance(df) -> str:
    """The provenance line for rows of :func:`workbench.results.load_bench` (uses its ``stale`` flags)."""
    items = []
    src = df["source"] if "source" in df.columns else [""] * len(df)
    for (commit, source), g in df.assign(_src=list(src)).groupby(["git_commit", "_src"], sort=True):
        flags = [f for f in g["stale"].tolist() if f is not None and f == f]
        stale = True if any(bool(f) for f in flags) else (False if flags else None)
        items.append((commit, g["date"].min() if "date" in g.columns else "", source, stale))
    return _provenance_text(items)


def commit_provenance(df, source: str = "") -> str:
    """The provenance line for a table with a ``git_commit`` column (asks git about each commit)."""
    from ..provenance import kernels_changed_since
    items = []
    for commit, g in df.groupby("git_commit", sort=True):
        date = g["date"].min() if "date" in g.columns else ""
        items.append((commit, date, source, kernels_changed_since(str(commit))))
    return _provenance_text(items)


def is_stale_note(note: str) -> bool:
    return "STALE" in note


def markdown_table(df, floatfmt: str = ".3g") -> str:
    """A GitHub-style markdown table (no tabulate dependency)."""
    def fmt(v):
        return format(v, floatfmt) if isinstance(v, float) else str(v)
    head = "| " + " | ".join(map(str, df.columns)) + " |"
    sep = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, sep, *body])


# ----------------------------------------------------------------------------------------------
# axes helpers
# ----------------------------------------------------------------------------------------------
def default_kernel_rows(df):
    """Rows timing the providers the figures know with their default kernel.

    Optimisation-ladder rungs (a ``kernel`` other than the provider's own name) and unknown
    providers are left out; notebook 05 shows those. Rows of provider "auto" are kept whatever
    kernel they record (newer tables record the rung "auto" resolved to for that call).
    """
    kernel = df["kernel"].fillna(df["provider"]) if "kernel" in df.columns else df["provider"]
    return df[df["provider"].isin(PROVIDER_ORDER) & ((kernel == df["provider"]) | (df["provider"] == DEFAULT_PROVIDER))]


def providers_in(df) -> list[str]:
    return [p for p in PROVIDER_ORDER if p in set(df["provider"])]


def _fmt_num(v, _=None) -> str:
    if v >= 1000:
        return f"{v:,.0f}"
    return f"{v:g}"


def readable_log_axis(ax, axis: str = "y"):
    """Log scale with a few plain-number major ticks (1-2-5 steps, finer over a short span), no minor labels."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator
    set_scale = ax.set_yscale if axis == "y" else ax.set_xscale
    set_scale("log")
    lo, hi = ax.get_ylim() if axis == "y" else ax.get_xlim()
    lo, hi = max(lo, 1e-12), max(hi, 1e-12)
    decades = np.log10(hi / lo)
    steps = [(1,), (1, 3), (1, 2, 5), (1, 1.5, 2, 3, 5, 7)]
    ticks = []
    for subs in steps[::-1] if decades < 0.6 else steps:
        ticks = [m * 10.0 ** e for e in range(int(np.floor(np.log10(lo))) - 1, int(np.ceil(np.log10(hi))) + 1)
                 for m in subs if lo <= m * 10.0 ** e <= hi]
        if decades >= 0.6 and 3 <= len(ticks) <= 7:
            break
        if decades < 0.6 and len(ticks) <= 6:
            break
    if len(ticks) < 2:  # a very short span: two ticks at the ends
        ticks = [float(f"{lo:.2g}"), float(f"{hi:.2g}")]
    a = ax.yaxis if axis == "y" else ax.xaxis
    a.set_major_locator(FixedLocator(ticks))
    a.set_major_formatter(FuncFormatter(_fmt_num))
    a.set_minor_locator(NullLocator())
    a.set_minor_formatter(NullFormatter())
    (ax.set_ylim if axis == "y" else ax.set_xlim)(lo, hi)


def pad_log_limits(ax, values, axis: str = "y", pad: float = 1.25):
    v = np.asarray([x for x in np.asarray(values, float).ravel() if np.isfinite(x) and x > 0])
    if len(v):
        (ax.set_ylim if axis == "y" else ax.set_xlim)(v.min() / pad, v.max() * pad)


def gapped_line(ax, positions, values, *, label=None, **kw):
    """Markers at every point; line segments only between neighbouring positions (p, p+1).

    ``positions`` are integer slots of a categorical axis, so a missing batch breaks the line
    instead of being interpolated over.
    """
    p = np.asarray(positions, int)
    y = np.asarray(values, float)
    order = np.argsort(p)
    p, y = p[order], y[order]
    marker = kw.pop("marker", "o")
    ms = kw.pop("markersize", 5)
    line_kw = {k: v for k, v in kw.items()}
    first = True
    start = 0
    for i in range(1, len(p) + 1):
        if i == len(p) or p[i] != p[i - 1] + 1:
            seg = slice(start, i)
            ax.plot(p[seg], y[seg], marker=marker, markersize=ms, label=label if first else None, **line_kw)
            first = False
            start = i


def categorical_batch_axis(ax, batches, label="batch (measured sizes, evenly spaced)"):
    ax.set_xticks(range(len(batches)))
    ax.set_xticklabels([str(int(b)) for b in batches])
    ax.set_xlim(-0.5, len(batches) - 0.5)
    ax.set_xlabel(label)
    ax.grid(axis="x", visible=False)


def legend_right(fig, handles, labels, title=None, **kw):
    """One legend for the whole figure, outside the axes on the right."""
    return fig.legend(handles, labels, title=title, loc="center left", bbox_to_anchor=(1.0, 0.5),
                      frameon=False, **kw)


def legend_below(fig, handles, labels, ncol=4, title=None, **kw):
    return fig.legend(handles, labels, title=title, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=ncol,
                      frameon=False, **kw)


def room_for_labels(fig, labels, *, pad_px: float = 4.0, rounds: int = 3):
    """Raise the top of each axes' (linear) y range until its value labels, drawn above the data, fit inside it.

    labels: {axes: [Text, ...]} anchored at their data value. The labels' heights are measured on the drawn
    figure (they are fixed in points whatever the range), so the headroom is what the text needs, not a guess;
    ``fig.tight_layout`` runs again after each change (new tick labels may widen the margin).
    """
    for _ in range(rounds):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        moved = False
        for ax, texts in labels.items():
            lo, top = ax.get_ylim()
            height = ax.bbox.height
            need = top
            for t in texts:
                v = float(t.get_position()[1])
                room = height - t.get_window_extent(renderer).height - pad_px
                if v > lo and room > 0:
                    need = max(need, lo + (v - lo) * height / room)
            if need > top * (1 + 1e-3):
                ax.set_ylim(lo, need)
                moved = True
        if not moved:
            return
        fig.tight_layout()


def _dedupe(handles, labels):
    seen, h2, l2 = set(), [], []
    for h, lab in zip(handles, labels):
        if lab and not lab.startswith("_") and lab not in seen:
            seen.add(lab)
            h2.append(h)
            l2.append(lab)
    return h2, l2


def figure_handles(fig):
    hs, ls = [], []
    for ax in fig.axes:
        h, lab = ax.get_legend_handles_labels()
        hs += h
        ls += lab
    return _dedupe(hs, ls)


def seeded_strip(ax, df, x, y, *, order, hue=None, hue_order=None, palette=None, dodge=False, jitter=0.15,
                 seed=SEED, size=16, alpha=0.85):
    """A strip plot with jitter from a seeded generator (same picture on every run)."""
    rng = np.random.default_rng(seed)
    groups = hue_order if hue is not None else [None]
    n = len(groups)
    width = 0.8 / n if dodge else 0.0
    for j, h in enumerate(groups):
        sub = df if h is None else df[df[hue] == h]
        pos = np.array([order.index(v) for v in sub[x]], float)
        if dodge:
            pos = pos - 0.4 + width * (j + 0.5)
        jit = rng.uniform(-jitter, jitter, len(pos)) * (width / 0.8 if dodge else 1.0)
        color = (palette or {}).get(h, None) if palette is not None else None
        ax.scatter(pos + jit, sub[y], s=size, color=color, alpha=alpha, label=str(h) if h is not None else None,
                   linewidths=0)
    ax.set_xticks(range(len(order)))
    ax.set_xticklabels(order)
    ax.set_xlim(-0.5, len(order) - 0.5)


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
    fig, axes = plt.subplots(2, len(panels), figsize=(4.6 * len(panels), 6.2), squeeze=False, sharex=True)
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


def fig_speedups(vs_fm, vs_simt, *, batches=None, ours: str = "mma"):
    """Speed of one of our providers (``ours``) relative to FlashMLA by heads (graph and eager panels) and over SIMT.

    The frames hold the columns ``flashmla time / <ours> time`` and ``simt time / <ours> time``; the legend
    names ``ours`` by its label (the batch sweeps only have the seed, "mma").
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
        ax.set_title(f"over per-head SIMT, 64 heads ({modes})", fontsize=10)
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
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.4))
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


# ----------------------------------------------------------------------------------------------
# the default kernel's numbers and the optimisation ladder (notebooks 04 and 05)
# ----------------------------------------------------------------------------------------------
def same_run_times(ok, *, batch, heads, topk, extra_topk=0, mode="graph", ours=(DEFAULT_PROVIDER, *DEFAULT_FALLBACK),
                   peers=("flashmla", "gather")) -> dict:
    """Our kernel's time at one shape, with the peers' times from the same table (one run).

    ok: rows of :func:`workbench.results.load_bench` (status ok), whole tables: only each sweep's current table
    counts (:func:`workbench.results.is_current`, the one rule); the others are history. The first of ``ours``
    with an autotuned (empty config) row at the shape wins: "auto" means the rows of provider "auto", any other name
    the rows of that kernel timed as itself. Among the current tables with such rows (one per sweep), those that
    also timed every peer at the shape come first, then the headline sweep's, then the newest.
    Returns kernel (the name from ``ours``), resolved (the kernel the rows record: for "auto",
    the rung it resolved to where the table says, else "auto"), ours_us, ``<peer>_us`` for each peer (NaN
    when the table has none), source, git_commit, stale; ours_us is NaN and kernel None when nothing matches.
    """
    from ..results import is_current
    ok = ok[is_current(ok)]
    shape = ((ok["mode"] == mode) & (ok.batch == batch) & (ok.heads == heads) & (ok.topk == topk)
             & (ok.s_q == 1) & (ok.extra_topk == extra_topk))
    cfg = ok["config"].fillna("") if "config" in ok.columns else ""
    kernel = ok["kernel"].fillna(ok["provider"]) if "kernel" in ok.columns else ok["provider"]
    here = ok[shape & (cfg == "")]
    kern = kernel[shape & (cfg == "")]
    prov = here["provider"]
    for k in ours:
        rows = here[prov == k] if k == DEFAULT_PROVIDER else here[(kern == k) & (prov == k)]
        if rows.empty:
            continue
        # which sweep answers (each has one current table): one that timed every peer at this shape too (one run),
        # where there is one (the overhead sweep's table, without the peers, does not beat a full one); of those
        # the headline sweep, the default kernel's published measurement (other sweeps that time it beside
        # something, e.g. isolate beside its variants, count only at shapes the headline table lacks)
        full = [src for src in rows.source.unique() if set(peers) <= set(here[here.source == src].provider)]
        pick = rows[rows.source.isin(full)] if full else rows
        if "sweep" in pick.columns and (pick.sweep == "headline").any():
            pick = pick[pick.sweep == "headline"]
        source = pick.sort_values(["date", "source"]).source.iloc[-1]
        mine = pick[pick.source == source]
        resolved = mine["kernel"].fillna(mine["provider"]).iloc[0] if "kernel" in mine.columns else k
        out = dict(kernel=k, resolved=str(resolved), ours_us=float(mine.median_us.median()), source=source,
                   git_commit=str(mine.git_commit.iloc[0]), stale=bool(mine.stale.fillna(False).any()))
        same = here[here.source == source]
        for peer in peers:
            r = same[same.provider == peer]
            out[f"{peer}_us"] = float(r.median_us.median()) if len(r) else float("nan")
        return out
    return dict(kernel=None, resolved=None, ours_us=float("nan"), source="", git_commit="", stale=None,
                **{f"{peer}_us": float("nan") for peer in peers})


def fig_ladder(times, panels, rungs, *, default=None, labels=None):
    """Time per optimisation-ladder rung (bars), one panel per shape, FlashMLA and the gather floors as lines.

    times: rows with ``panel``, ``kernel`` and ``median_us`` (rungs, plus "flashmla", "gather" and, where a table
    has it, "gather_async" as the references); panels: (panel key, title) pairs; rungs: kernel names in ladder order; default: the rung
    the default kernel resolves to (drawn with a black edge), one name or {panel key: name} when it
    depends on the call's size; labels: kernel -> tick label.
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    labels = labels or {}
    per_panel = default if isinstance(default, dict) else {key: default for key, _ in panels}
    colors = kernel_colors(rungs)
    # at least 9 inches: the legend below fits on one line
    fig, axes = plt.subplots(1, len(panels), figsize=(max(3.6 * len(panels) + 0.6, 9.0), 4.6), squeeze=False)
    values = {}
    lines = [("flashmla", "--")] + [(p, PROVIDER_STYLE[p]["linestyle"]) for p in LADDER_FLOORS
                                    if p in set(times.kernel)]
    for ax, (key, title) in zip(axes[0], panels):
        default = per_panel.get(key)
        sub = times[times.panel == key].groupby("kernel").median_us.median()
        fm = sub.get("flashmla", np.nan)
        top = []
        values[ax] = []
        for i, k in enumerate(rungs):
            v = sub.get(k, np.nan)
            if not np.isfinite(v):
                ax.text(i, 0, "n/a", ha="center", va="bottom", fontsize=7, color="grey", rotation=90)
                continue
            ax.bar(i, v, width=0.7, color=colors[k], edgecolor="k" if k == default else "white",
                   linewidth=1.6 if k == default else 0.5)
            # one line, turned upright: 13 bars leave about 0.2 inch each, too narrow for a level label
            txt = (f"{v:.0f}" if v >= 30 else f"{v:.1f}") + (f" ({fm / v:.2f}x)" if np.isfinite(fm) else "")
            values[ax].append(ax.text(i, v, txt, ha="center", va="bottom", rotation=90, fontsize=7, zorder=5,
                                      bbox=dict(facecolor="white", edgecolor="none", alpha=0.85, pad=0.6)))
            top.append(v)
        for name, style in lines:
            v = sub.get(name, np.nan)
            if np.isfinite(v):
                ax.axhline(v, color=PROVIDER_COLORS[name], linestyle=style, linewidth=1.6)
                top.append(v)
        ax.set_ylim(0, max(top) * 1.05 if top else 1)
        ax.set_xticks(range(len(rungs)))
        ax.set_xticklabels([labels.get(k, k) for k in rungs], rotation=40, ha="right", fontsize=8)
        ax.set_xlim(-0.6, len(rungs) - 0.4)
        ax.grid(axis="x", visible=False)
        ax.set_xlabel("rung (ladder order)")
        ax.set_ylabel("time per call (us)" if ax is axes[0][0] else "")
        ax.set_title(title, fontsize=10)
    # the tick labels name every rung, so the legend keeps to what they do not say
    handles = [Patch(facecolor="white", edgecolor="k", linewidth=1.6)] + [
        Line2D([], [], color=PROVIDER_COLORS[name], linestyle=style, linewidth=1.6) for name, style in lines]
    names = ["black edge: what 'auto' runs at that shape"] + [
        PROVIDER_LABELS[name] + (" (same run)" if name == "flashmla" else "") for name, _ in lines]
    fig.tight_layout()
    room_for_labels(fig, values)
    legend_below(fig, handles, names, ncol=2 if len(names) > 3 else len(names),
                 title="above each bar: time in us (speed vs FlashMLA)", fontsize=9, title_fontsize=9)
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
            ax.text(x, max(m, hi), text, ha="center", va="bottom",
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
    from ..results import parse_config
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
        raise ValueError(f"projection: target {target.arch} has no dram_gbps (workbench/targets.py)")
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


# ----------------------------------------------------------------------------------------------
# correctness (notebook 02)
# ----------------------------------------------------------------------------------------------
def fig_error_ecdf(ratio_df):
    """ECDF of the per-element error / tolerance over every element, with the exactly-zero share stated."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4))
    impls = sorted(ratio_df.impl.unique())
    colors = kernel_colors(impls)
    nz_all = ratio_df.ratio[ratio_df.ratio > 0]
    lo = max(float(nz_all.min()) / 2, 1e-12) if len(nz_all) else 1e-8
    for impl in impls:
        r = np.sort(ratio_df[ratio_df.impl == impl].ratio.to_numpy(float))
        n = len(r)
        zero = float((r == 0).mean()) if n else 0.0
        nz = r[r > 0]
        y = zero + np.arange(1, len(nz) + 1) / max(n, 1)
        xs = np.concatenate([[lo], nz, [max(1.5, nz.max() * 1.5 if len(nz) else 1.5)]])
        ys = np.concatenate([[zero], y, [y[-1] if len(y) else zero]])
        ax.step(xs, ys, where="post", color=colors.get(impl), linewidth=1.8,
                label=f"{impl}: {n:,} elements, {100 * zero:.1f}% exactly zero error, "
                      f"worst {r.max() if n else 0:.2g}")
    ax.axvline(1.0, color="k", linestyle="--", linewidth=1, label="tolerance (1 = at the limit)")
    ax.set_xscale("log")
    ax.set_xlim(lo, 1.5)
    ax.set_ylim(0, 1.02)
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{100 * v:.0f}%"))
    ax.set_xlabel("|out - ref| / (0.1 rms(ref) + 2.01/128 |ref|), per element")
    ax.set_ylabel("share of elements with error ≤ x")
    ax.text(0.01, 0.98, "the curve starts at the share of exactly-zero errors", transform=ax.transAxes, va="top",
            fontsize=8, color="grey")
    h, lab = ax.get_legend_handles_labels()
    legend_below(fig, h, lab, ncol=1)
    fig.tight_layout()
    return fig


def fig_worst_by_shape(grid_df):
    import matplotlib.pyplot as plt
    import seaborn as sns
    impls = sorted(grid_df.impl.unique())
    fig, axes = plt.subplots(1, len(impls), figsize=(5.5 * len(impls), 3.8), sharey=True, squeeze=False)
    for ax, impl in zip(axes[0], impls):
        g = grid_df[grid_df.impl == impl]
        piv = g.pivot_table(index="heads", columns="topk", values="out_elem_ratio", aggfunc="max")
        sns.heatmap(piv, annot=True, fmt=".3f", cmap="rocket_r", vmin=0, vmax=1, ax=ax,
                    cbar_kws={"label": "worst element / tolerance"})
        ax.set_title(impl, fontsize=10)
        ax.set_xlabel("topk")
        ax.set_ylabel("heads")
    fig.tight_layout()
    return fig


def fig_gpu_checks(gpu):
    """Worst output and lse error per GPU check (log axis, so small lse errors show), with case counts."""
    import matplotlib.pyplot as plt
    worst = gpu.groupby(["check", "impl"]).agg(cases=("passed", "size"), passed=("passed", "sum"),
                                               elem=("out_elem_ratio", "max"),
                                               lse=("lse_ratio", "max")).reset_index()
    checked = worst.dropna(subset=["elem"])
    checks = sorted(checked.check.unique())
    impls = sorted(checked.impl.unique())
    colors = kernel_colors(impls)
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.9 + 0.75 * len(checks) * max(1, len(impls)) / 2 + 1.2),
                             sharey=True)
    hgt = 0.8 / max(1, len(impls))
    vals = pd_concat_values(checked)
    lo = 10 ** np.floor(np.log10(max(min(vals), 1e-9))) if vals else 1e-4
    for ax, col, label in ((axes[0], "elem", "worst output element error / tolerance"),
                           (axes[1], "lse", "worst lse error / tolerance")):
        for j, impl in enumerate(impls):
            s = checked[checked.impl == impl].set_index("check")
            for k, c in enumerate(checks):
                if c in s.index and np.isfinite(s.loc[c, col]):
                    v = float(s.loc[c, col])
                    y = k - 0.4 + hgt * (j + 0.5)
                    ax.barh(y, v - lo, left=lo, height=hgt * 0.9, color=colors.get(impl, "grey"), label=impl)
                    ax.text(v * 1.1, y, f"{v:.2g}", va="center", fontsize=8)
        ax.axvline(1.0, color="k", linestyle="--", linewidth=1, label="tolerance")
        ax.set_xscale("log")
        ax.set_xlim(lo, 3)
        ax.set_xlabel(label)
        ax.grid(axis="y", visible=False)
    tick = []
    for c in checks:
        s = worst[worst.check == c]
        tick.append(f"{c}\n{int(s.passed.sum())}/{int(s.cases.sum())} cases passed")
    axes[0].set_yticks(range(len(checks)))
    axes[0].set_yticklabels(tick, fontsize=9)
    axes[0].set_ylabel("check")
    axes[0].set_ylim(len(checks) - 0.5, -0.5)
    h, lab = figure_handles(fig)
    legend_right(fig, h, lab, title="kernel (impl)")
    fig.tight_layout()
    return fig, worst


def pd_concat_values(df) -> list[float]:
    v = np.concatenate([df["elem"].to_numpy(float), df["lse"].to_numpy(float)]) if len(df) else np.array([])
    return [x for x in v if np.isfinite(x) and x > 0]


# ----------------------------------------------------------------------------------------------
# padding (notebook 01)
# ----------------------------------------------------------------------------------------------
def fig_padding_costs(costs):
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    ys = range(len(costs))
    kb = costs.k_tile_smem_bytes / 1024
    axes[0].barh(list(ys), costs.wasted_mma_fraction, color="#D55E00")
    axes[0].set_xlabel("wasted share of nope MMA work")
    axes[0].xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{100 * v:.0f}%"))
    axes[0].xaxis.set_major_locator(plt.MaxNLocator(4))
    axes[1].barh(list(ys), kb, color="#0072B2")
    axes[1].set_xlabel("K tile in shared memory, 64 tokens, bf16 (KB)")
    axes[0].set_yticks(list(ys))
    axes[0].set_yticklabels(costs.layout)
    axes[0].set_ylabel("layout of the 448 nope columns")
    axes[1].set_yticks(list(ys))
    axes[1].set_yticklabels([])
    for ax, vals, fmt in ((axes[0], costs.wasted_mma_fraction, "{:.1%}"), (axes[1], kb, "{:.0f} KB")):
        for i, v in enumerate(vals):
            ax.text(v, i, " " + fmt.format(v), va="center")
        ax.margins(x=0.25)
        ax.invert_yaxis()
        ax.grid(axis="y", visible=False)
    axes[0].set_title("MMA work spent on zeros", fontsize=10)
    axes[1].set_title("shared memory per K tile", fontsize=10)
    fig.tight_layout()
    return fig


def fig_page_byte_map(spans, layout, bs: int):
    import matplotlib.pyplot as plt
    colors = {"nope fp8": "#0072B2", "rope bf16": "#E69F00", "scale UE8M0": "#009E73", "pad byte": "#D55E00",
              "page padding": "#999999"}
    fig, (ax, axz) = plt.subplots(2, 1, figsize=(12, 3.8))
    for _, s in spans.iterrows():
        for a in (ax, axz):
            a.broken_barh([(s.start, s.end - s.start)], (0, 1), color=colors[s.kind], edgecolor="white", linewidth=0.5)
    for o in range(bs):
        ax.text(o * layout.data_bytes_per_token + layout.d_nope / 2, 0.5, f"token {o} nope", ha="center",
                va="center", color="white", fontsize=8)
    ax.set_xlim(0, layout.page_bytes(bs))
    ax.set_xlabel("byte offset in page")
    ax.set_yticks([])
    ax.set_title(f"whole page: block_size={bs}, page_bytes={layout.page_bytes(bs)}", fontsize=10)
    axz.set_xlim(layout.scale_offset(bs) - 24, bs * layout.bytes_per_token + 24)
    for o in range(bs):
        axz.text(layout.scale_offset(bs) + o * layout.scale_bytes_per_token + 3.5, 0.5, f"t{o}", ha="center",
                 va="center", color="white", fontsize=8)
    axz.set_yticks([])
    axz.set_xlabel("byte offset in page (zoom: 7 scale bytes + 1 pad byte per token)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    fig.tight_layout()
    legend_below(fig, handles, list(colors), ncol=5)
    return fig
