"""Every figure renders from its plotting helper with labels, a title, legends clear of the data, no text cut off
or on top of another, axes not squeezed into a corner, and the same bytes twice.

The figure functions of ``workbench.report`` (``figures``, ``plots_<topic>``) are what the notebooks call; here
they get the committed tables from ``data/`` (small) or a few synthetic rows, so the whole file runs in about a minute.
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from workbench.report import (figures, plots_correctness, plots_ladder, plots_occupancy, plots_padding,  # noqa: E402
                              plots_throughput)
from workbench.report.results import (current_rows, current_tables, is_current, load_bench, load_correctness,  # noqa: E402
                               parse_config)

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"


# ---------------------------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bench():
    df = load_bench(data_dir=DATA)
    ok = df[df.status == "ok"].copy()
    ok["config"] = ok.config.fillna("")
    return ok


def _with_new_providers(ok):
    """The committed table plus a 'gather' floor and an optimisation-ladder rung, as later tables will have."""
    base = ok[(ok.provider == "flashmla") & (ok.config == "") & ok["mode"].isin(["graph", "eager"])]
    gather = base.assign(provider="gather", kernel="gather", median_us=base.median_us * 0.4)
    rung = ok[(ok.provider == "mma") & (ok.config == "")].assign(kernel="mma_rung_tile512", median_us=1.0)
    return pd.concat([ok, gather, rung], ignore_index=True)


LADDER_SHAPES = {"h16": (64, 16, 2048, 0), "h64": (64, 64, 2048, 0), "h128": (64, 128, 2048, 0),
                 "b1": (1, 64, 512, 0), "prod": (64, 16, 128, 512)}


def _ladder_times(ok):
    """Rows for fig_ladder from the committed ladder tables (panel, kernel, median_us) and the rungs in order."""
    from workbench import registry
    rungs = [s.name for s in registry.rungs()]
    _, rows = _current_ladder_rows(ok)
    return pd.DataFrame(rows), rungs


def _current_ladder_rows(ok):
    """The current ladder table's autotuned graph rows, and fig_ladder's rows of them (panel, kernel, median_us)."""
    lad = current_rows("ladder", ok)
    lad = lad[(lad.config == "") & (lad["mode"] == "graph") & (lad.s_q == 1)]
    rows = []
    for key, (b, h, k, e) in LADDER_SHAPES.items():
        sub = lad[(lad.batch == b) & (lad.heads == h) & (lad.topk == k) & (lad.extra_topk == e)]
        rows += [dict(panel=key, kernel=r.kernel, median_us=r.median_us) for r in sub.itertuples()]
    return lad, rows


def _ladder_as_published(ok):
    """fig_ladder's arguments as notebook 05 draws the published figure: every rung of data/rungs.csv (removed
    ones too) labelled with its number, and what 'auto' runs at each shape (a black edge)."""
    from workbench import registry
    record = pd.read_csv(DATA / "rungs.csv", dtype={"rung": "Int64"})
    record = record[record.rung.notna()].sort_values("rung")
    lad, rows = _current_ladder_rows(ok)
    cap = lad.capability.iloc[0]
    default = {key: registry.auto_kernel(cap, heads=h, tokens=b * (k + e), queries=b, scopes=2 if e else 1)
               for key, (b, h, k, e) in LADDER_SHAPES.items()}
    labels = {r.name: f"{r.rung} {r.name}" for r in record.itertuples()}
    return pd.DataFrame(rows), list(record.name), default, labels


def _tuned(ok):
    rows = figures.default_kernel_rows(ok)
    return rows[rows.config == ""]


def _lab():
    lab = pd.concat([pd.read_csv(DATA / f"resources_{a}.csv") for a in ("sm_120", "sm_90")], ignore_index=True)
    mma = lab[lab.kernel == "mma"].copy()
    mma["PREFETCH"] = [int(parse_config(c).get("PREFETCH", 0)) for c in mma.config]
    for c in ("BLOCK_H", "BLOCK_T"):
        mma[c] = mma[c].astype(int)
    mma["tile"] = "H" + mma.BLOCK_H.astype(str) + " T" + mma.BLOCK_T.astype(str)
    return mma


LIMITS = {"sm_120": 101376, "sm_90": 232448}


def _ratio(tuned, a, b):
    keys = ["batch", "heads", "topk", "s_q", "extra_topk"]
    med = tuned.groupby(["provider", "mode"] + keys).median_us.median()
    return (med.loc[b] / med.loc[a]).dropna().rename(f"{b} time / {a} time").reset_index()


def build(name, ok):
    """(figure, title, note) for one figure name, drawn as its notebook draws it: from each sweep's current table."""
    ok = ok[is_current(ok)]
    tuned = _tuned(ok)
    note = figures.bench_provenance(tuned)
    batches = sorted(tuned.batch.unique())
    if name == "throughput_time_vs_batch" or name == "throughput_time_vs_batch_eager":
        sel = tuned[tuned.sweep.isin(["batch", "baselines", "headline"]) & (tuned.s_q == 1) & (tuned.extra_topk == 0)]
        mode = "eager" if name.endswith("eager") else "graph"
        return plots_throughput.fig_time_vs_batch(sel, mode=mode, batches=batches), f"time vs batch, {mode}", note
    if name == "throughput_production_and_sq2":
        panels = [("production", 64, "production, 64 heads"), ("s_q2", 64, "s_q = 2, 64 heads")]
        return plots_throughput.fig_production(tuned, panels, batches=batches), "production", note
    if name == "throughput_speedups":
        fm = _ratio(tuned, "mma", "flashmla")
        fm = fm[(fm.topk == 2048) & (fm.s_q == 1) & (fm.extra_topk == 0)]
        # the notebook's subtitle where SIMT comes from another run (the baselines sweep): the longest title there
        return plots_throughput.fig_speedups(fm, _ratio(tuned, "mma", "simt"), batches=batches,
                                             simt_runs="SIMT from another run: baselines"), "speed-ups", note
    if name == "throughput_roofline":
        rf = tuned[tuned.sweep.isin(["batch", "headline"]) & (tuned.s_q == 1)].copy()
        rf["intensity"] = rf.flops / rf.bytes
        return plots_throughput.fig_roofline(rf, 4251.0, 691.0), "roofline", note
    if name == "throughput_batch_model":
        from workbench.bench import fit_batch_model
        fit = fit_batch_model(figures.default_kernel_rows(ok))
        show = fit[(fit.topk == 2048) & (fit.s_q == 1) & (fit.extra_topk == 0)]
        return plots_throughput.fig_batch_model(show), "batch model", note
    if name == "warps_4_vs_8":
        mma = _lab()
        regs = mma[(mma.arch == "sm_90") & (mma.BLOCK_T == 16) & (mma.num_stages == 1)]
        m = ok[(ok.provider == "mma") & (ok.kernel == "mma")]
        graph = m[(m.sweep == "configs") & (m["mode"] == "graph") & (m.BLOCK_T == 16) & (m.num_stages == 1)]
        eager = m[(m.sweep == "warps") & (m["mode"] == "eager")]
        return plots_occupancy.fig_warps(regs, graph, eager), "warps", note
    if name == "occupancy_shared_memory":
        return plots_occupancy.fig_shared_memory(_lab(), ["sm_120", "sm_90"], LIMITS, {}), "shared memory", "Measured at commit x."
    if name == "occupancy_registers":
        return plots_occupancy.fig_registers(_lab(), ["sm_120", "sm_90"]), "registers", "Measured at commit x."
    if name == "pruning_model_vs_compiled":
        mma = _lab()
        agree = pd.DataFrame(dict(arch=mma.arch, model_bytes=mma.model_shared_bytes, compiled_bytes=mma.shared_bytes,
                                  model=np.where(mma.status == "over_limit", "prune", "keep"),
                                  compiled=np.where(mma.status == "over_limit", "over", "fits")))
        return plots_occupancy.fig_pruning(agree, ["sm_120", "sm_90"], LIMITS), "pruning", None
    if name == "correctness_error_distribution":
        rng = np.random.default_rng(0)
        r = np.concatenate([np.zeros(300), 10 ** rng.uniform(-6, -0.5, 700)])
        df = pd.concat([pd.DataFrame(dict(impl=i, ratio=r)) for i in ("mma", "simt")])
        return plots_correctness.fig_error_ecdf(df), "errors", None
    if name == "correctness_worst_by_shape":
        g = pd.DataFrame([dict(impl=i, heads=h, topk=k, out_elem_ratio=0.01 * h + 0.001 * k)
                          for i in ("mma", "simt") for h in (1, 5) for k in (1, 37)])
        return plots_correctness.fig_worst_by_shape(g), "worst by shape", None
    if name == "correctness_gpu":
        gpu = load_correctness(DATA)
        return plots_correctness.fig_gpu_checks(gpu)[0], "GPU checks", figures.commit_provenance(gpu, gpu.source.iloc[0])
    if name == "correctness_gpu_old_table":
        gpu = load_correctness(DATA, name="correctness_h200.csv")
        return plots_correctness.fig_gpu_checks(gpu)[0], "GPU checks", figures._provenance_text([("35074e5", "2026-11-30", "", True)])
    if name in ("ladder_time_per_rung", "ladder_b1_and_production"):
        times, rungs, default, labels = _ladder_as_published(ok)
        panels = ([("h16", "b64 h16 topk2048"), ("h64", "b64 h64 topk2048"), ("h128", "b64 h128 topk2048")]
                  if name == "ladder_time_per_rung"
                  else [("b1", "b1 h64 topk512"), ("prod", "b64 h16 main 128@256 + extra 512@64")])
        lad = current_rows("ladder", ok)
        note = figures.bench_provenance(lad[lad.config == ""])
        return plots_ladder.fig_ladder(times, panels, rungs, default=default, labels=labels), "ladder", note
    if name == "throughput_host_overhead":  # the current overhead table, as notebook 04 draws it
        over = current_rows("overhead", ok)
        return plots_throughput.fig_overhead(over), "host overhead", figures.bench_provenance(over)
    if name == "throughput_heads":  # the current heads table, as notebook 04 draws it
        rows = current_rows("heads", ok)
        rows = rows[rows.provider.isin(["auto", "flashmla", "gather", "gather_async", "auto_portable"])]
        return plots_throughput.fig_heads(rows), "heads", figures.bench_provenance(rows)
    if name == "projection_sm120":  # notebook 03: the current headline and forced tables, the sm_120 lab table
        from workbench.lab.targets import get_target
        head = current_rows("headline", ok)
        proj = plots_occupancy.sm120_projection(head, pd.read_csv(DATA / "resources_sm_120.csv"), get_target("sm_120"),
                                  forced=current_rows(["forced"], ok))
        note = "PROJECTION, not a measurement: H200 times, sm_120 floor from NVIDIA's spec. " + figures.bench_provenance(head)
        return plots_occupancy.fig_projection(proj, get_target("sm_120")), "PROJECTION, not a measurement: sm_120", note
    if name == "padding_costs":
        from workbench.format import padding
        return plots_padding.fig_padding_costs(pd.DataFrame(padding.padding_costs(block_t=64))), "padding", None
    if name == "page_byte_map":
        from workbench.format import padding
        from workbench.format.layout import MODEL1
        return plots_padding.fig_page_byte_map(pd.DataFrame(padding.page_byte_map(4)), MODEL1, 4), "page", None
    raise KeyError(name)


FIGURES = ["ladder_time_per_rung", "ladder_b1_and_production", "correctness_gpu_old_table",
           "throughput_time_vs_batch", "throughput_time_vs_batch_eager", "throughput_production_and_sq2",
           "throughput_speedups", "throughput_roofline", "throughput_batch_model", "warps_4_vs_8",
           "occupancy_shared_memory", "occupancy_registers", "pruning_model_vs_compiled",
           "correctness_error_distribution", "correctness_worst_by_shape", "correctness_gpu", "padding_costs",
           "page_byte_map", "throughput_host_overhead", "projection_sm120", "throughput_heads"]


# ---------------------------------------------------------------------------------------------
# checks
# ---------------------------------------------------------------------------------------------
def _legends(fig):
    out = list(fig.legends)
    out += [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    return out


def _data_points(ax):
    """Display coordinates of the data: line vertices (and points along each drawn segment), scatter offsets."""
    pts = []
    for line in ax.get_lines():
        xy = np.asarray(line.get_xydata(), float)
        xy = xy[np.isfinite(xy).all(axis=1)]
        if not len(xy):
            continue
        d = line.get_transform().transform(xy)
        if line.get_linestyle() not in ("None", "", " ") and len(d) > 1:
            t = np.linspace(0, 1, 12)[:, None, None]
            d = np.concatenate([d, (d[:-1] + t * (d[1:] - d[:-1])).reshape(-1, 2)])
        pts.append(d)
    for coll in ax.collections:
        off = np.asarray(coll.get_offsets(), float)
        if off.ndim == 2 and len(off) and off.shape[1] == 2 and type(coll).__name__ == "PathCollection":
            off = off[np.isfinite(off).all(axis=1)]
            pts.append(coll.get_offset_transform().transform(off))
    return np.concatenate(pts) if pts else np.zeros((0, 2))


def _bars(ax, renderer):
    from matplotlib.patches import Rectangle
    return [p.get_window_extent(renderer) for p in ax.patches if isinstance(p, Rectangle) and p.get_visible()]


def legend_overlaps(fig) -> list[str]:
    """What a legend box covers: data points, points along lines, or bars."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    bad = []
    for lg in _legends(fig):
        box = lg.get_window_extent(r).padded(-1)
        for ax in fig.axes:
            if ax.get_label() == "<colorbar>":
                continue
            p = _data_points(ax)
            inside = ((p[:, 0] > box.x0) & (p[:, 0] < box.x1) & (p[:, 1] > box.y0) & (p[:, 1] < box.y1))
            if inside.any():
                bad.append(f"legend covers {int(inside.sum())} data points of '{ax.get_title()}'")
            if any(b.overlaps(box) for b in _bars(ax, r)):
                bad.append(f"legend covers bars of '{ax.get_title()}'")
    return bad


def missing_labels(fig) -> list[str]:
    bad = []
    for ax in fig.axes:
        if ax.get_label() == "<colorbar>" or not ax.get_visible():
            continue
        xt = [t for t in ax.get_xticklabels() if t.get_visible() and t.get_text()]
        yt = [t for t in ax.get_yticklabels() if t.get_visible() and t.get_text()]
        row = ax.get_subplotspec().rowspan if ax.get_subplotspec() else None
        # an inner panel of a shared grid may leave the x label to the bottom row
        bottom = row is None or row.stop == ax.get_subplotspec().get_gridspec().nrows
        if xt and bottom and not ax.get_xlabel():
            bad.append(f"x label missing on '{ax.get_title()}'")
        if yt and not ax.get_ylabel() and not _row_has_ylabel(fig, ax):
            bad.append(f"y label missing on '{ax.get_title()}'")
    return bad


def _row_has_ylabel(fig, ax):
    spec = ax.get_subplotspec()
    if spec is None:
        return False
    return any(o.get_ylabel() for o in fig.axes if o.get_subplotspec() is not None
               and o.get_subplotspec().rowspan == spec.rowspan and o.get_label() != "<colorbar>")


def vertical_segments(fig) -> list[str]:
    """Line segments that jump vertically between nearly equal x (as 128 next to 132 on a log axis did)."""
    bad = []
    for ax in fig.axes:
        for line in ax.get_lines():
            if line.get_linestyle() in ("None", "", " "):
                continue
            xy = np.asarray(line.get_xydata(), float)
            if len(xy) < 2 or np.ptp(xy[:, 0]) == 0:  # axvline and friends
                continue
            d = line.get_transform().transform(xy)
            dx, dy = np.abs(np.diff(d[:, 0])), np.abs(np.diff(d[:, 1]))
            if ((dx < 8) & (dy > 20)).any():
                bad.append(f"near-vertical segment in '{ax.get_title()}'")
    return bad


# ---------------------------------------------------------------------------------------------
# text layout: text cut off or off the image, texts on top of each other, axes squeezed into a corner
# ---------------------------------------------------------------------------------------------
SAVE_DPI = 200  # save_figure's PNG
OVERLAP_PX = 2.0  # at SAVE_DPI: boxes sharing up to this much each way touch (anti-aliasing), they do not collide
EDGE_PX = 1.0  # a text may stick out of its area by this much (rounding)
MIN_AXES_SHARE = 0.5  # the axes (the rectangle around their frames) cover at least this share of the plot


def _owner_name(fig, ax):
    if ax is None:
        return "figure"
    name = ax.get_title() or ax.get_label() or ""
    return f"axes {fig.axes.index(ax)}" + (f" '{name}'" if name and not name.startswith("_") else "")


def _drawn_ticks(axis):
    """The ticks the axis draws (inside the view limits), not the spare ones matplotlib keeps."""
    return axis._update_ticks() if axis.get_visible() else []


def _texts(fig):
    """(kind, axes or None, Text) for every text the saved image shows with something in it."""
    from matplotlib.text import Annotation
    out = [("suptitle", None, fig._suptitle), ("x label", None, fig._supxlabel), ("y label", None, fig._supylabel)]
    out += [("figure text", None, t) for t in fig.texts if t not in (fig._suptitle, fig._supxlabel, fig._supylabel)]
    for lg in fig.legends:
        out += [("legend", None, t) for t in [lg.get_title(), *lg.get_texts()]] if lg.get_visible() else []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        out += [("title", ax, t) for t in (ax.title, ax._left_title, ax._right_title)]
        if ax.axison:
            for axis, xy in ((ax.xaxis, "x"), (ax.yaxis, "y")):
                if not axis.get_visible():
                    continue
                out += [(f"{xy} label", ax, axis.label), (f"{xy} offset", ax, axis.offsetText)]
                out += [(f"{xy} tick label", ax, lab)
                        for tick in _drawn_ticks(axis) for lab in (tick.label1, tick.label2)]
        out += [("value label", ax, t) for t in ax.texts]
        lg = ax.get_legend()
        if lg is not None and lg.get_visible():
            out += [("legend", ax, t) for t in [lg.get_title(), *lg.get_texts()]]
    renderer = fig.canvas.get_renderer()
    keep = []
    for kind, ax, t in out:
        if t is None or not t.get_visible() or not t.get_text().strip():
            continue
        if isinstance(t, Annotation) and not t._check_xy(renderer):  # an annotation whose point is off the axes
            continue  # is not drawn at all
        keep.append((kind, ax, t))
    return keep


def _text_corners(t, renderer) -> np.ndarray:
    """The four corners (display pixels) of the box a text covers: its lines, turned as the text is, and the
    background box it may have (a bar value's white box hides what is under it)."""
    ext = t.get_window_extent(renderer)
    rot = t.get_rotation()
    if rot % 90:
        t.set_rotation(0)
        flat = t.get_window_extent(renderer)
        t.set_rotation(rot)
        w, h = flat.width, flat.height
    else:
        w, h = (ext.width, ext.height) if rot % 180 == 0 else (ext.height, ext.width)
    patch = t.get_bbox_patch()
    if patch is not None and patch.get_visible():
        pad = getattr(patch.get_boxstyle(), "pad", 0.0) * patch.get_mutation_scale()
        w, h = w + 2 * pad, h + 2 * pad
    a = np.deg2rad(rot)
    turn = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    half = np.array([[-w, -h], [w, -h], [w, h], [-w, h]]) / 2
    centre = np.array([(ext.x0 + ext.x1) / 2, (ext.y0 + ext.y1) / 2])
    return centre + half @ turn.T


def _boxes_overlap(a, b, shrink=OVERLAP_PX) -> bool:
    """Whether two (turned) rectangles share more than ``shrink`` pixels across (separating-axis test)."""
    def shrunk(p):  # each side moved in by shrink / 2
        u, v = p[1] - p[0], p[3] - p[0]
        su = max(0.0, 1 - shrink / max(float(np.hypot(*u)), 1e-9))
        sv = max(0.0, 1 - shrink / max(float(np.hypot(*v)), 1e-9))
        return p.mean(axis=0) + np.array([[-su, -sv], [su, -sv], [su, sv], [-su, sv]]) @ np.array([u, v]) / 2
    a, b = shrunk(a), shrunk(b)
    for poly in (a, b):
        for i in range(2):
            edge = poly[i + 1] - poly[i]
            n = np.array([-edge[1], edge[0]])
            pa, pb = a @ n, b @ n
            if pa.max() <= pb.min() or pb.max() <= pa.min():
                return False
    return True


def saved_area(fig, renderer):
    """The part of the figure the saved image shows, in display pixels: save_figure saves with
    bbox_inches="tight", so the image is the figure's tight box (every artist in the layout) plus
    savefig.pad_inches; anything outside that box is cut off the image."""
    from matplotlib import rcParams
    from matplotlib.transforms import Bbox
    box = fig.get_tightbbox(renderer).padded(rcParams["savefig.pad_inches"])
    return Bbox(box.get_points() * fig.dpi)


def _inside(box, area, tol=EDGE_PX) -> bool:
    return (box[:, 0].min() >= area.x0 - tol and box[:, 0].max() <= area.x1 + tol
            and box[:, 1].min() >= area.y0 - tol and box[:, 1].max() <= area.y1 + tol)


def squeezed_axes(fig, renderer, min_share=MIN_AXES_SHARE) -> str | None:
    """The axes squeezed into a corner: the rectangle around all axes frames covers less than ``min_share`` of
    the plot's part of the image (the axes with their titles, labels and ticks, and the figure legends; the
    figure title and the provenance note, bands across the whole width whose height is the length of their
    text, are left out). The rectangle, not the frames alone: the gaps between panels hold their tick labels."""
    from matplotlib.transforms import Bbox
    axes = [ax for ax in fig.axes if ax.get_visible()]
    if not axes:
        return None
    frames = Bbox.union([ax.bbox for ax in axes])
    plot = Bbox.union([ax.get_tightbbox(renderer) for ax in axes]
                      + [lg.get_window_extent(renderer) for lg in fig.legends if lg.get_visible()])
    share = frames.width * frames.height / (plot.width * plot.height)
    if share >= min_share:
        return None
    return (f"the axes are squeezed: their frames (x {frames.x0:.0f}..{frames.x1:.0f}, "
            f"y {frames.y0:.0f}..{frames.y1:.0f} px) cover {share:.0%} of the plot (x {plot.x0:.0f}..{plot.x1:.0f}, "
            f"y {plot.y0:.0f}..{plot.y1:.0f} px: axes, their labels and the legends), at least {min_share:.0%} wanted")


def text_layout_problems(fig, *, min_axes_share=MIN_AXES_SHARE) -> list[str]:
    """What a reader of the saved PNG would see wrong with the text, one line each, naming the text and where.

    The figure is drawn with Agg at the size and dpi save_figure writes the PNG with (its inches, 200 dpi).
    save_figure saves with bbox_inches="tight": the image grows to hold every artist of the layout, so the
    canvas edge cuts nothing, and "clipped" means what still gets cut with that:

    - a text outside the saved image (one left out of the tight box), or a text with clip_on cut by its
      clip box (the axes) -- its part outside is not drawn;
    - a value label (``ax.texts``: bar values, annotations, notes drawn in the axes) that is not wholly
      inside its axes, where it runs over the frame, the title or the next panel;
    - two texts on top of each other (boxes as the text is turned, with their background box, sharing
      more than OVERLAP_PX pixels each way): a bar value under its neighbour's white box ("113" shown as
      "11"), tick labels running into each other, a label over another panel's labels;
    - the axes squeezed into a corner (:func:`squeezed_axes`): legends, labels and margins take so much of
      the image that the axes are left a small part of it.

    Every pair of texts is compared, whichever axes they belong to (value labels, tick labels, titles, axis
    labels, legend entries, the figure title and note). Legend against data is legend_overlaps' job.
    """
    dpi = fig.dpi
    fig.set_dpi(SAVE_DPI)
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        area = saved_area(fig, renderer)
        items = [(kind, ax, t, _text_corners(t, renderer)) for kind, ax, t in _texts(fig)]

        def where(box):
            (x0, y0), (x1, y1) = box.min(axis=0), box.max(axis=0)
            return f"x {x0:.0f}..{x1:.0f}, y {y0:.0f}..{y1:.0f} px"

        def what(kind, ax, t):
            return f"{kind} {t.get_text()!r} of {_owner_name(fig, ax)}"

        bad = []
        for kind, ax, t, box in items:
            if not _inside(box, area):
                bad.append(f"{what(kind, ax, t)} at {where(box)} is outside the saved image "
                           f"(x {area.x0:.0f}..{area.x1:.0f}, y {area.y0:.0f}..{area.y1:.0f} px)")
            clip = t.get_clip_box() if t.get_clip_on() else None
            if clip is not None and not _inside(box, clip):
                bad.append(f"{what(kind, ax, t)} at {where(box)} is cut by its clip box "
                           f"(x {clip.x0:.0f}..{clip.x1:.0f}, y {clip.y0:.0f}..{clip.y1:.0f} px)")
            elif kind == "value label" and not _inside(box, ax.bbox):
                b = ax.bbox
                bad.append(f"{what(kind, ax, t)} at {where(box)} runs out of its axes "
                           f"(x {b.x0:.0f}..{b.x1:.0f}, y {b.y0:.0f}..{b.y1:.0f} px)")
        for i, (k1, a1, t1, b1) in enumerate(items):
            for k2, a2, t2, b2 in items[i + 1:]:
                if _boxes_overlap(b1, b2):
                    bad.append(f"{what(k1, a1, t1)} at {where(b1)} overlaps {what(k2, a2, t2)} at {where(b2)}")
        problem = squeezed_axes(fig, renderer, min_axes_share)
        if problem:
            bad.append(problem)
        return bad
    finally:
        fig.set_dpi(dpi)


# ---------------------------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _theme():
    import matplotlib.pyplot as plt
    figures.set_theme()
    yield
    plt.close("all")


@pytest.mark.parametrize("name", FIGURES)
def test_figure_basics_and_same_bytes_twice(name, bench, tmp_path):
    ok = _with_new_providers(bench)
    files = []
    for run in ("a", "b"):
        fig, title, note = build(name, ok)
        paths = figures.save_figure(fig, name, tmp_path / run, title=title, note=note)
        if run == "a":
            assert fig._suptitle is not None and fig._suptitle.get_text(), "a title"
            assert not legend_overlaps(fig)  # draws the figure once for the checks after it
            assert not missing_labels(fig)
            assert not vertical_segments(fig)
            problems = text_layout_problems(fig)
            assert not problems, f"{name}:\n" + "\n".join(problems)
        files.append([p.read_bytes() for p in paths])
    assert files[0][0] == files[1][0], "PNG differs between two runs"
    assert files[0][1] == files[1][1], "SVG differs between two runs"
    assert b"<dc:date>" not in files[0][1]


def test_legend_check_catches_a_legend_over_data():
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    x = np.linspace(0, 1, 50)
    ax.plot(x, np.full_like(x, 0.5), label="flat")
    ax.legend(loc="center")
    assert legend_overlaps(fig)


def test_text_layout_check_passes_a_clean_figure_with_turned_tick_labels():
    """Tick labels turned 40 degrees sit side by side although their upright boxes overlap: not flagged."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 3.5))
    names = [f"{i} rung_name" for i in range(10)]
    bars = ax.bar(range(10), np.arange(10) + 1.0)
    ax.bar_label(bars, fontsize=7)
    ax.set_ylim(0, 12)
    ax.set_xticks(range(10))
    ax.set_xticklabels(names, rotation=40, ha="right", fontsize=8)
    ax.set_xlabel("rung")
    ax.set_ylabel("time")
    fig.tight_layout()
    fig.canvas.draw()
    boxes = [t.get_window_extent() for t in ax.get_xticklabels()]
    assert any(a.overlaps(b) for a, b in zip(boxes, boxes[1:])), "the upright boxes do overlap"
    assert text_layout_problems(fig) == []


def test_text_layout_check_catches_a_value_label_outside_its_axes():
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.bar([0, 1], [10.0, 113.0])
    ax.set_ylim(0, 115)  # no headroom: the label of the tall bar sits on the frame
    ax.text(1, 113.0, "113", ha="center", va="bottom")
    ax.text(0, 10.0, "10", ha="center", va="bottom")
    problems = text_layout_problems(fig)
    assert len(problems) == 1 and "value label '113'" in problems[0] and "runs out of its axes" in problems[0]


def test_text_layout_check_catches_a_label_cut_by_the_axes_edge():
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.bar([0, 1], [10.0, 20.0])
    ax.set_xlim(-0.5, 1.5)
    ax.annotate("a long label at the right edge", (1.4, 15), ha="left", clip_on=True)
    ax.texts[-1].set_clip_box(ax.bbox)  # clipped to the axes, as a text with clip_on=True in the axes is
    problems = text_layout_problems(fig)
    assert any("a long label" in p and "cut by its clip box" in p for p in problems), problems


def test_text_layout_check_catches_text_off_the_saved_image():
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 1])
    t = fig.text(1.3, 0.5, "left out of the layout")
    t.set_in_layout(False)  # bbox_inches="tight" does not grow to hold it: the saved image cuts it off
    problems = text_layout_problems(fig)
    assert len(problems) == 1 and "figure text 'left out of the layout'" in problems[0]
    assert "outside the saved image" in problems[0]


def test_text_layout_check_catches_overlapping_annotations():
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 1])
    ax.annotate("first", (0.5, 0.5))
    ax.annotate("second", (0.52, 0.5))
    problems = text_layout_problems(fig)
    assert len(problems) == 1 and "'first'" in problems[0] and "overlaps" in problems[0] and "'second'" in problems[0]


def test_text_layout_check_catches_a_value_under_its_neighbours_box():
    """The ladder figure's defect: level two-line labels on 13 narrow bars, each on a white box that hides the
    end of the label before it ("113" read as "11")."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(3.4, 4))
    v = np.linspace(113, 52, 13)
    ax.bar(range(13), v)
    for i, x in enumerate(v):
        ax.text(i, x, f"{x:.0f}\n{84 / x:.2f}x", ha="center", va="bottom", fontsize=7.5,
                bbox=dict(facecolor="white", edgecolor="none", pad=0.6))
    ax.set_ylim(0, 170)
    ax.set_xlim(-1, 13)
    problems = text_layout_problems(fig)
    assert any(p.startswith("value label '113") and "overlaps value label" in p for p in problems), problems


def test_text_layout_check_catches_axes_squeezed_into_a_corner():
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(4, 3))
    for i in range(6):
        ax.plot([0, 1], [i, i + 1], label=f"a provider with a long and careful description, number {i}")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    fig.tight_layout()
    figures.legend_right(fig, *ax.get_legend_handles_labels())
    problems = text_layout_problems(fig)
    assert len(problems) == 1 and "the axes are squeezed" in problems[0], problems


def test_new_providers_are_drawn_and_rungs_ignored(bench):
    ok = _with_new_providers(bench)
    rows = figures.default_kernel_rows(ok)
    assert "gather" in set(rows.provider) and "mma_rung_tile512" not in set(rows.kernel)
    fig, _, _ = build("throughput_time_vs_batch", ok)
    labels = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    assert figures.PROVIDER_LABELS["mma"] in labels and figures.PROVIDER_LABELS["gather"] in labels
    assert figures.PROVIDER_LABELS["flashmla"] in labels


def test_graph_lines_do_not_bridge_missing_batches():
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    figures.gapped_line(ax, [0, 1, 2, 6], [1.0, 2.0, 3.0, 4.0], label="x")
    segs = [ln.get_xydata()[:, 0].tolist() for ln in ax.get_lines()]
    assert segs == [[0, 1, 2], [6]]


def test_provenance_marks_stale_data(bench):
    note = figures.bench_provenance(bench)
    commit = str(bench.git_commit.iloc[0])[:7]
    assert commit in note
    stale = bench[bench.provider == "mma"].stale.any()
    assert ("STALE" in note) == bool(stale)
    fresh = figures._provenance_text([("abcdef1234", "2026-12-01", "bench_x.csv", False)])
    assert "STALE" not in fresh and "abcdef1" in fresh and "unchanged" in fresh


def test_readable_log_ticks_and_roofline_has_several_x_ticks(bench):
    fig, _, _ = build("throughput_roofline", _with_new_providers(bench))
    fig.canvas.draw()
    for ax in fig.axes:
        xt = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
        assert len(xt) >= 2, xt
        yt = [t for t in ax.get_yticklabels() if t.get_text()]
        assert len(yt) <= 8


def test_default_kernel_labels():
    """'auto' is the default kernel; the seed 'mma' is never called the default."""
    assert figures.PROVIDER_LABELS["auto"] == "workbench default (auto)"
    assert "default" not in figures.PROVIDER_LABELS["mma"] and "seed" in figures.PROVIDER_LABELS["mma"]
    assert "auto" in figures.PROVIDER_ORDER and "auto" in figures.PROVIDER_COLORS


def test_default_kernel_rows_leave_out_the_rungs_the_production_sweep_times_by_name():
    """The production sweep also times every crossover rung by name (for the two-scope rule): notebook 04's figures
    draw only the default, FlashMLA and the floors of it."""
    from workbench.bench.sweeps import CROSSOVER_PROVIDERS
    provs = CROSSOVER_PROVIDERS + ("auto", "flashmla", "gather_fine")
    # auto_portable records the rung it resolved to, as auto does; the rungs by name their own
    df = pd.DataFrame(dict(provider=provs, kernel=[("portable_ws" if p.startswith("auto") else p) for p in provs]))
    assert sorted(figures.default_kernel_rows(df).provider) == ["auto", "flashmla", "gather_fine"]


def test_ladder_figure_draws_every_rung_and_the_reference_lines(bench):
    times, rungs = _ladder_times(bench)
    fig = plots_ladder.fig_ladder(times, [("h16", "b64 h16")], rungs, default="wgmma")
    ax = fig.axes[0]
    # every rung the table measured has its bar (a rung registered after the table has no row, and no bar, yet)
    measured = [r for r in rungs if r in set(times[times.panel == "h16"].kernel)]
    assert measured and len([p for p in ax.patches if p.get_height() > 0]) == len(measured)
    ys = sorted(round(float(ln.get_ydata()[0]), 3) for ln in ax.get_lines())
    # FlashMLA and every floor probe the table timed (gather, and gather_async from its first run on)
    ref = times[(times.panel == "h16") & times.kernel.isin(["flashmla", *figures.LADDER_FLOORS])].median_us
    assert len(ref) >= 2 and ys == sorted(round(float(v), 3) for v in ref)
    labels = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    assert any("'auto' runs" in t for t in labels) and any(figures.PROVIDER_LABELS["gather"] in t for t in labels)
    drawn = set(times.kernel) & set(figures.LADDER_FLOORS)
    assert all(any(figures.PROVIDER_LABELS[f] in t for t in labels) for f in drawn)


def test_same_run_times_prefers_auto_and_takes_peers_from_its_table(bench):
    r = figures.same_run_times(bench, batch=64, heads=16, topk=2048)
    assert r["kernel"] == "auto" and r["source"].endswith("_headline.csv")
    cur = current_tables(bench).set_index("sweep").source
    assert r["source"] == cur["headline"], "the current headline table (results.current_tables)"
    raw = pd.read_csv(DATA / r["source"])
    sel = raw[(raw.provider == "flashmla") & (raw["mode"] == "graph") & (raw.batch == 64) & (raw.heads == 16)
              & (raw.topk == 2048) & (raw.extra_topk == 0)]
    assert r["flashmla_us"] == pytest.approx(sel.median_us.median())
    # the current headline table lacks the production shape: the newest other current table with auto rows there
    prod = figures.same_run_times(bench, batch=64, heads=16, topk=128, extra_topk=512)
    now = bench[is_current(bench)]
    auto_prod = now[(now.provider == "auto") & (now.batch == 64) & (now.heads == 16) & (now.topk == 128)
                    & (now.extra_topk == 512) & (now["mode"] == "graph")]
    assert prod["kernel"] == "auto" and prod["source"] == auto_prod.sort_values(["date", "source"]).source.iloc[-1]
    assert not prod["source"].endswith("_headline.csv") and prod["source"] in set(cur)
    assert figures.default_kernel_rows(bench).provider.eq("auto").sum() == bench.provider.eq("auto").sum()


@pytest.mark.parametrize("gpu", ["NVIDIA H200", None], ids=["reference-gpu", "any-gpu"])
def test_load_correctness_picks_the_newest_table_of_the_code_here_and_keeps_the_old_one(gpu):
    from workbench.report.results import _chosen_gpu, _table_gpus, _tables, stale_flags, table_name
    new = load_correctness(DATA, gpu=gpu)
    dated = _tables(DATA, "correctness_*.csv")  # data/ and archive/ (gzipped there)
    if gpu is not None:  # that GPU's tables only (a table whose rows name none is the H200's)
        chosen = _chosen_gpu(gpu, set().union(*(_table_gpus(p) for p in dated)))
        dated = [p for p in dated if chosen in _table_gpus(p)]

    def checked_here(p):  # every row checked the checked-out kernel sources
        t = pd.read_csv(p)
        return "kernel_hash" in t and all(f is False for f in stale_flags(t[["kernel_hash", "git_commit"]]
                                                                         .drop_duplicates()))
    here = [p for p in dated if checked_here(p)]
    newest = max(here or dated, key=lambda p: (str(pd.read_csv(p, usecols=["date"]).date.max()), table_name(p)))
    assert new.source.iloc[0] == table_name(newest)
    old = load_correctness(DATA, name="correctness_h200.csv")
    assert old.source.iloc[0] == "correctness_h200.csv" and len(old)


def test_overhead_figure_draws_a_bar_per_provider_and_shape(tmp_path):
    rows = []
    for (b, h, k), times in {(1, 64, 512): dict(auto=350.0, flashmla=30.0),
                             (64, 16, 2048): {"auto": 160.0, "auto+plan": 4.0, "flashmla": -2.0}}.items():
        for provider, med in times.items():
            rows += [dict(provider=provider, mode="overhead", status="ok", batch=b, heads=h, topk=k, s_q=1,
                          extra_topk=0, median_us=med, p20_us=med - 3, p80_us=med + 5),
                     dict(provider=provider, mode="graph", status="ok", batch=b, heads=h, topk=k, s_q=1,
                          extra_topk=0, median_us=1000.0, p20_us=999.0, p80_us=1001.0)]
    rows.append(dict(rows[0], status="skipped", median_us=np.nan))
    df = pd.DataFrame(rows)
    files = []
    for run in ("a", "b"):
        fig = plots_throughput.fig_overhead(df)
        ax = fig.axes[0]
        bars = sorted(round(p.get_height(), 6) for p in ax.patches if p.get_visible() and p.get_width() > 0)
        # the axis ends at OVERHEAD_CLIP x the median bar (30 us, above the 15 us goal): 350 and 160 are cut there
        clip = plots_throughput.OVERHEAD_CLIP * 30.0
        assert bars == sorted([clip, 30.0, clip, 4.0, -2.0]), "one bar per (provider, shape) overhead row"
        assert ax.get_ylim()[1] == clip
        assert sorted(t.get_text() for t in ax.texts if "(cut)" in t.get_text()) == ["160\n(cut)", "350\n(cut)"]
        assert [t.get_text() for t in ax.get_xticklabels()] == ["b1 h64 topk512", "b64 h16 topk2048"]
        assert any(t.get_text() == "n/a" for t in ax.texts), "auto+plan has no b1 row: marked, not dropped"
        names = [t.get_text() for t in fig.legends[0].get_texts()]
        assert names[:3] == [figures.PROVIDER_LABELS["auto"], "workbench default through a plan (auto+plan)", "FlashMLA"]
        assert names[-2:] == ["goal for a plain call (15 us)", "goal for a call through a plan (10 us)"]
        assert sorted(round(ln.get_ydata()[0], 3) for ln in ax.get_lines() if ln.get_color() == "#B00020") == [10, 15]
        assert ax.get_ylim()[0] < -2.0
        paths = figures.save_figure(fig, "overhead", tmp_path / run, title="host overhead", note="Measured at commit x.")
        if run == "a":
            assert not legend_overlaps(fig) and not missing_labels(fig) and not text_layout_problems(fig)
        files.append([p.read_bytes() for p in paths])
    assert files[0] == files[1], "same bytes twice"
    with pytest.raises(ValueError, match="overhead"):
        plots_throughput.fig_overhead(df[df["mode"] == "graph"])


def test_every_registered_kernel_and_a_new_one_get_distinct_colours():
    """The ladder figure draws one bar per rung: two rungs sharing a colour (the old grey fallback) made
    rungs 9 and 10 indistinguishable; a rung registered later gets a free colour with no plotting edit."""
    from workbench import registry
    from workbench.report.figures import KERNEL_COLORS, kernel_colors
    names = list(registry.names("split", "fused")) + ["a_rung_registered_later", "and_another"]
    colors = kernel_colors(names)
    assert list(colors) == names
    assert len(set(colors.values())) == len(names)
    assert all(colors[k] == KERNEL_COLORS[k] for k in names if k in KERNEL_COLORS)


@pytest.mark.slow  # about a second: drawn and laid out once
def test_projection_figure_says_projection_and_marks_a_shape_without_proxy_rows(tmp_path):
    """The sm_120 projection drawn from a table where one shape has no auto_portable row: that shape's proxy bar and
    occupancy bar are "n/a" (not dropped), the rest drawn; the panel title and legend call it a PROJECTION; the
    layout checks pass."""
    from workbench.lab.targets import get_target
    sm120 = get_target("sm_120")
    rows = []
    for heads, kernel, proxy in ((16, "portable_ws", 57.0), (64, None, None)):
        nbytes = 64 * 2048 * 584 + 2 * 64 * heads * 512 * 2
        for provider, us in (("auto_portable", proxy), ("gather_async", 26.0), ("gather", 33.0)):
            if us is not None:
                rows.append(dict(provider=provider, kernel=kernel if provider == "auto_portable" else provider,
                                 mode="graph", status="ok", batch=64, s_q=1, heads=heads, topk=2048, extra_topk=0,
                                 median_us=us, p20_us=us - 0.5, p80_us=us + 0.5, bytes=nbytes,
                                 hbm_copy_gbps=4200.0, source="bench_x.csv"))
    lab = pd.DataFrame([dict(kernel="portable_ws", arch="sm_120",
                             config="BLOCK_H=16,BLOCK_T=32,num_warps=4,num_stages=1",
                             status="fits", mma="HMMA", registers=128, spill_stores=0, shared_bytes=84180,
                             blocks_per_sm=1, warps_per_sm=8, occupancy=1 / 6, limiter="shared_memory")])
    proj = plots_occupancy.sm120_projection(pd.DataFrame(rows), lab, sm120)
    fig = plots_occupancy.fig_projection(proj, sm120)
    figures.save_figure(fig, "projection", tmp_path, title="PROJECTION, not a measurement", note="Measured at commit x.")
    ax, occ = fig.axes
    assert "PROJECTION" in ax.get_title()
    assert [t.get_text() for t in ax.texts].count("n/a") == 1 and [t.get_text() for t in occ.texts].count("n/a") == 1
    assert sum(p.get_height() > 0 for p in occ.patches) == 1
    legend = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    assert any("PROJECTED" in t and "1,792 GB/s" in t for t in legend)
    assert not legend_overlaps(fig) and not missing_labels(fig)
    problems = text_layout_problems(fig)
    assert not problems, "\n".join(problems)
