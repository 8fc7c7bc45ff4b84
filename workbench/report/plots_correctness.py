"""Notebook 02's figures: the error distribution, the worst case by shape and the GPU check table.

The shared look, save helpers and provenance notes are in :mod:`workbench.report.figures`.
"""
from __future__ import annotations

import numpy as np

from .figures import figure_handles, kernel_colors, legend_below, legend_right


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
    # room right of the worst bar for its label (a failed check can run past the tolerance several times)
    hi = max([3.0] + [3.0 * v for v in vals if np.isfinite(v)])
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
        ax.set_xlim(lo, hi)
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
