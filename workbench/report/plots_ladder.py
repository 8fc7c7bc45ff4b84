"""Notebook 05's figures: the optimisation ladder, one bar per rung at the headline shapes.

The shared look, save helpers and provenance notes are in :mod:`workbench.report.figures`.
"""
from __future__ import annotations

import numpy as np

from .figures import (LADDER_FLOORS, PROVIDER_COLORS, PROVIDER_LABELS, PROVIDER_STYLE, kernel_colors, legend_below,
                      room_for_labels)


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
    # at least 9 inches: the legend below fits on one line; a panel widens with the ladder (0.19 inch a rung keeps
    # the upright tick labels apart)
    panel_w = max(3.6, 0.19 * len(rungs) + 0.6)
    fig, axes = plt.subplots(1, len(panels), figsize=(max(panel_w * len(panels) + 0.6, 9.0), 5.8), squeeze=False)
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
        ax.set_xticklabels([labels.get(k, k) for k in rungs], rotation=90, ha="center", fontsize=8)
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
