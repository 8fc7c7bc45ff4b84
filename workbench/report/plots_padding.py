"""Notebook 01's figures: what the 448 -> 512 padding costs, and the byte map of one page.

The shared look, save helpers and provenance notes are in :mod:`workbench.report.figures`.
"""
from __future__ import annotations

from .figures import legend_below


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
