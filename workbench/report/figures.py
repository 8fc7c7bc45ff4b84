"""One look for every figure: what the figure modules (``plots_<topic>``, one per notebook) share.

Theme and save helpers (PNG at 200 dpi + SVG, byte-identical from run to run; tables as CSV beside
them), the provenance line every figure drawn from ``data/`` carries, the axis and legend helpers, and
:func:`same_run_times` (notebooks 04 and 05). Each figure is one function (``fig_*``) in its notebook's module
(``plots_padding`` 01, ``plots_correctness`` 02, ``plots_occupancy`` 03, ``plots_throughput`` 04, ``plots_ladder``
05) that takes plain data frames and returns a matplotlib figure. The notebooks call these;
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

from ..bench.sweeps import FLOOR_PROBES

THEME = dict(style="whitegrid", context="notebook", palette="colorblind")
PROVIDER_LABELS = {
    "auto": "workbench default (auto)",
    "mma": "seed MMA kernel",
    "flashmla": "FlashMLA",
    "gather": "gather floor (reads the bytes, no math)",
    "gather_async": "gather floor, cp.async (the decode's plan)",
    "gather_fine": "gather floor, 64 tokens a program (the fastest measured)",
    "auto_portable": "portable default (what auto runs without wgmma)",
    "simt": "per-head SIMT kernel",
    "reference": "PyTorch reference",
}
PROVIDER_ORDER = list(PROVIDER_LABELS)
PROVIDER_COLORS = {"auto": "#0072B2", "mma": "#56B4E9", "flashmla": "#E69F00", "gather": "#4D4D4D", "simt": "#009E73",
                   "reference": "#CC79A7", "gather_async": "#000000", "auto_portable": "#D55E00",
                   "gather_fine": "#117733"}
PROVIDER_STYLE = {"gather": dict(linestyle=":", marker="s"), "gather_async": dict(linestyle="-.", marker="v"),
                  "gather_fine": dict(linestyle=(0, (5, 1, 1, 1, 1, 1)), marker="^"),
                  "auto": dict(marker="D", markersize=7)}
# The default kernel: provider "auto" (registry.auto_kernel: a Gluon rung on sm_90). Tables before 81746ba time the
# seed as provider "mma"; the figures call that "seed MMA kernel", never the default.
DEFAULT_PROVIDER = "auto"
LADDER_FLOORS = FLOOR_PROBES  # the floor probes the ladder figures draw as lines (those the sweeps time), where timed
DEFAULT_FALLBACK = ("wgmma",)  # what "auto" ran on the H200 before the 4-lane rungs, timed by name in old tables
# One colour per kernel (optimisation-ladder rungs and the correctness tables' impl column).
KERNEL_COLORS = {"mma": "#56B4E9", "tile512": "#D55E00", "tile512_bf16dq": "#CC79A7", "tile512_3d": "#8C6D31",
                 "wgmma": "#0072B2", "wgmma_4lane": "#332288", "wgmma_rope": "#882255", "wgmma_2cta": "#44AA99",
                 "wgmma_headwarps": "#117733", "wgmma_xchg": "#DDAA33", "wgmma_f16": "#AA4499",
                 "wgmma_f16_2cta": "#999933", "wgmma_ws": "#661100", "auto": "#0072B2", "simt": "#009E73"}


def kernel_colors(names) -> dict:
    """A colour per kernel name: its own from KERNEL_COLORS, else (a rung registered later, with no edit here)
    the next tab20 colour no kernel in ``names`` uses yet, so no two bars of one figure share a colour; in the
    order of ``names`` (a name without a colour of its own before one with it came last before)."""
    import seaborn as sns
    out = {k: KERNEL_COLORS[k] for k in names if k in KERNEL_COLORS}
    spare = iter(c for c in sns.color_palette("tab20").as_hex() if c not in set(out.values()))
    for k in names:
        if k not in out:
            out[k] = next(spare, "grey")
    return {k: out[k] for k in names}


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


def record_drawn_gpu(rows, stem: str, out_dir) -> Path:
    """Write which GPU measured ``rows`` (the tables notebook ``stem`` draws) beside its figures, as
    ``drawn_gpu_<stem>.csv``: ``--publish`` reads it, so that only the reference GPU's figures reach figures/."""
    import pandas as pd

    from .pipeline import DRAWN_GPU
    from .results import _gpu_of
    return save_table(pd.DataFrame({"notebook": stem, "gpu": sorted(set(_gpu_of(rows)))}), DRAWN_GPU.format(stem),
                      out_dir)


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
    """The provenance line for rows of :func:`workbench.report.results.load_bench` (uses its ``stale`` flags)."""
    items = []
    src = df["source"] if "source" in df.columns else [""] * len(df)
    for (commit, source), g in df.assign(_src=list(src)).groupby(["git_commit", "_src"], sort=True):
        flags = [f for f in g["stale"].tolist() if f is not None and f == f]
        stale = True if any(bool(f) for f in flags) else (False if flags else None)
        items.append((commit, g["date"].min() if "date" in g.columns else "", source, stale))
    return _provenance_text(items)


def commit_provenance(df, source: str = "") -> str:
    """The provenance line for a table with a ``git_commit`` column (asks git about each commit)."""
    from .provenance import kernels_changed_since
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
# the default kernel's numbers and the optimisation ladder (notebooks 04 and 05)
# ----------------------------------------------------------------------------------------------
def same_run_times(ok, *, batch, heads, topk, extra_topk=0, mode="graph", ours=(DEFAULT_PROVIDER, *DEFAULT_FALLBACK),
                   peers=("flashmla", "gather"), gpu=None) -> dict:
    """Our kernel's time at one shape, with the peers' times from the same table (one run).

    ok: rows of :func:`workbench.report.results.load_bench` (status ok), whole tables: only each sweep's current table
    counts (:func:`workbench.report.results.is_current`, the one rule); the others are history. The first of ``ours``
    with an autotuned (empty config) row at the shape wins: "auto" means the rows of provider "auto", any other name
    the rows of that kernel timed as itself. Among the current tables with such rows (one per sweep), those that
    also timed every peer at the shape come first, then the headline sweep's, then the newest.
    Returns kernel (the name from ``ours``), resolved (the kernel the rows record: for "auto",
    the rung it resolved to where the table says, else "auto"), ours_us, ``<peer>_us`` for each peer (NaN
    when the table has none), source, git_commit, stale; ours_us is NaN and kernel None when nothing matches.
    ``gpu``: whose current tables count (:func:`workbench.report.results.is_current`); None is the reference GPU
    (or the only GPU ``ok`` has). The notebooks pass the GPU they draw.
    """
    from .results import REFERENCE_GPU, is_current
    ok = ok[is_current(ok, gpu=gpu or REFERENCE_GPU)]
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
