"""One look for every figure: seaborn theme, PNG (200 dpi) + SVG, tables as CSV beside them."""
from __future__ import annotations

from pathlib import Path

THEME = dict(style="whitegrid", context="notebook", palette="colorblind")
PROVIDER_ORDER = ["mma", "flashmla", "simt", "reference"]


def set_theme():
    import matplotlib
    import seaborn as sns
    sns.set_theme(**THEME)
    matplotlib.rcParams.update({"figure.dpi": 100, "savefig.bbox": "tight", "axes.titleweight": "bold"})


def save_figure(fig, name: str, out_dir, *, title: str | None = None) -> list[Path]:
    """Save ``fig`` as out_dir/name.png (200 dpi) and .svg; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if title:  # above every axes title and label, measured after drawing; bbox_inches="tight" keeps it
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        inv = fig.transFigure.inverted()
        top = max((inv.transform(ax.get_tightbbox(renderer).corners())[:, 1].max() for ax in fig.axes), default=0.95)
        fig.suptitle(title, fontweight="bold", y=top + 0.01, va="bottom")
    paths = [out / f"{name}.png", out / f"{name}.svg"]
    fig.savefig(paths[0], dpi=200, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight")
    return paths


def save_table(df, name: str, out_dir) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.csv"
    df.to_csv(path, index=False)
    return path


def gpu_label(df) -> str:
    """'NVIDIA H200 (sm_90), driver ..., triton ...' from a results table's provenance columns."""
    r = df.iloc[0]
    return f"{r['gpu']} ({r['capability']}), driver {r['driver']}, triton {r['triton']}"


def markdown_table(df, floatfmt: str = ".3g") -> str:
    """A GitHub-style markdown table (no tabulate dependency)."""
    def fmt(v):
        return format(v, floatfmt) if isinstance(v, float) else str(v)
    head = "| " + " | ".join(map(str, df.columns)) + " |"
    sep = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, sep, *body])
