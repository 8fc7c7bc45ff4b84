# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: MLA workbench
#     language: python
#     name: mla-workbench
# ---

# %% [markdown]
# # 4. Throughput on the H200: the kernels against FlashMLA
#
# Everything here is drawn from the long-format benchmark table (`data/bench_h200.csv`), or from a
# fresh sweep when a GPU is present and `fresh=True`. Each row is one (provider, shape, mode)
# measurement with median, p20 and p80 over cold-L2 calls, checked against the fp32 reference first.

# %% tags=["parameters"]
device = "cpu"
out_dir = "../figures"
data_dir = "../data"
fresh = False          # True on a GPU: run the sweep named below now and plot that instead
sweep = "all"

# %%
import os

if device == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from workbench.bench import fit_batch_model, rows_frame, run_sweep
from workbench.plotting import PROVIDER_ORDER, gpu_label, markdown_table, save_figure, save_table, set_theme

set_theme()
if fresh and device == "cuda":
    df = rows_frame(run_sweep(sweep))
    save_table(df, "bench_fresh", out_dir)
else:
    df = pd.read_csv(os.path.join(data_dir, "bench_h200.csv"))
ok = df[df.status == "ok"].copy()
ok["config"] = ok.config.fillna("")
tuned = ok[ok.config == ""]  # the autotuned kernels and the peers; forced configs are A/B material
label = gpu_label(df)
hbm, gemm = df.hbm_copy_gbps.iloc[0], df.gemm_tflops.iloc[0]
print(f"{label}; commit {df.git_commit.iloc[0][:7]}, {df.date.iloc[0]}")
print(f"measured in the same run: HBM copy {hbm:.0f} GB/s, bf16 GEMM {gemm:.0f} TFLOP/s; {len(df)} rows, "
      f"{(df.status != 'ok').sum()} not ok")

# %% [markdown]
# ## Time against batch, every provider
# Read the eager MMA curve with care: it is flat at 150-400 us because it is host-bound (argument
# checks, the autotuner's dispatch and two launches of kernels with ~35 arguments each), while the
# same kernel replayed from a CUDA graph takes 17 us at batch 1. Servers capture graphs; the headline
# ratios use graph timings.

# %%
sel = tuned[(tuned.sweep.isin(["batch", "baselines"])) & (tuned.s_q == 1) & (tuned.extra_topk == 0)]
order = [p for p in PROVIDER_ORDER if p in sel.provider.unique()]
g = sns.relplot(sel, x="batch", y="median_us", hue="provider", hue_order=order, style="mode", col="heads",
                row="topk", kind="line", markers=True, height=3, aspect=1.2, facet_kws={"sharey": False})
for ax in g.axes.flat:
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
g.set_axis_labels("batch", "time per call, median (us)")
save_figure(g.figure, "throughput_time_vs_batch", out_dir, title=f"Sparse MLA decode, s_q=1, page 256: {label}")

# %%
panels = [("production", 64, "production shape, 64 heads"), ("production", 128, "production shape, 128 heads"),
          ("s_q2", 64, "s_q = 2, topk 2048, 64 heads")]
fig, axes = plt.subplots(1, 3, figsize=(15, 4), sharey=True)
for ax, (sw, h, title) in zip(axes, panels):
    sub = tuned[(tuned.sweep == sw) & (tuned.heads == h)]
    sns.lineplot(sub, x="batch", y="median_us", hue="provider", style="mode", markers=True, ax=ax,
                 legend=ax is axes[0])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_title(title)
    ax.set_ylabel("time per call, median (us)")
save_figure(fig, "throughput_production_and_sq2", out_dir,
            title=f"Production shape (main 128 on 256-token pages + extra 512 on 64-token pages) and s_q=2: {label}")

# %% [markdown]
# ## Speed-ups: MMA over SIMT, and against FlashMLA by head count

# %%
def ratio(a, b, keys):
    med = tuned.groupby(["provider", "mode"] + keys).median_us.median()  # one value per shape and mode
    return (med.loc[b] / med.loc[a]).dropna().rename(f"{b} time / {a} time").reset_index()


keys = ["batch", "heads", "topk", "s_q", "extra_topk"]
vs_fm = ratio("mma", "flashmla", keys)
vs_fm = vs_fm[(vs_fm.topk == 2048) & (vs_fm.s_q == 1) & (vs_fm.extra_topk == 0)]
vs_simt = ratio("mma", "simt", keys)
fig, axes = plt.subplots(1, 2, figsize=(12, 4))
sns.lineplot(vs_fm, x="batch", y="flashmla time / mma time", hue="heads", style="mode", marker="o",
             palette="viridis", ax=axes[0])
axes[0].axhline(1, color="k", linestyle="--")
axes[0].set_xscale("log", base=2)
axes[0].set_ylabel("speed vs FlashMLA (>1: MMA faster)")
axes[0].set_title("MMA vs FlashMLA, topk 2048")
sns.barplot(vs_simt, x="batch", y="simt time / mma time", hue="mode", ax=axes[1])
axes[1].set_ylabel("speed-up of MMA over SIMT")
axes[1].set_title("MMA vs per-head SIMT, 64 heads, topk 2048")
for c in axes[1].containers:
    axes[1].bar_label(c, fmt="%.0fx")
save_figure(fig, "throughput_speedups", out_dir, title=label)
save_table(vs_fm, "speedup_vs_flashmla", out_dir)
save_table(vs_simt, "speedup_vs_simt", out_dir)

# %% [markdown]
# ## Roofline with the ceilings measured in the same run

# %%
rf = tuned[tuned.sweep.isin(["batch", "headline"])].copy()
rf["intensity"] = rf.flops / rf.bytes
fig, ax = plt.subplots(figsize=(8, 5))
i = np.logspace(np.log10(rf.intensity.min() / 2), np.log10(max(rf.intensity.max(), gemm * 1e12 / (hbm * 1e9)) * 2))
ax.plot(i, np.minimum(gemm, hbm * i / 1000), color="k", label=f"ceiling: {hbm:.0f} GB/s copy, {gemm:.0f} TFLOP/s GEMM")
sns.scatterplot(rf, x="intensity", y="tflops", hue="provider", style="mode", ax=ax, alpha=0.8)
ax.set_xscale("log")
ax.set_yscale("log")
ax.xaxis.set_minor_formatter(plt.NullFormatter())
ax.set_xlabel("arithmetic intensity (FLOP / byte)")
ax.set_ylabel("achieved TFLOP/s")
ax.legend(fontsize=8, loc="lower right")
save_figure(fig, "throughput_roofline", out_dir, title=f"Roofline, s_q=1, all batches and heads: {label}")

# %% [markdown]
# ## Fixed cost plus cost per request
# Least squares of time against batch, per provider and shape: `time = fixed + per_request * batch`.

# %%
fit = fit_batch_model(df)
save_table(fit, "batch_model_fit", out_dir)
show = fit[(fit.topk == 2048) & (fit.s_q == 1) & (fit.extra_topk == 0)].copy()
show["provider, mode"] = show.provider + ", " + show["mode"]
fig, ax = plt.subplots(1, 2, figsize=(13, 4.5))
for a, col, name in ((ax[0], "fixed_us", "fixed part (us, log)"), (ax[1], "per_request_us", "per request (us, log)")):
    sns.barplot(show, x="heads", y=col, hue="provider, mode", ax=a, errorbar=None, legend=a is ax[1])
    a.set_yscale("log")
    a.set_ylabel(name)
ax[1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
save_figure(fig, "throughput_batch_model", out_dir, title=f"time = fixed + per_request x batch, topk 2048: {label}")
show[["provider", "mode", "heads", "fixed_us", "per_request_us", "r2", "points"]]

# %% [markdown]
# ## Headline ratios (all from the table above, one run)

# %%
def t(provider, mode, batch, heads, topk):
    r = tuned[(tuned.provider == provider) & (tuned["mode"] == mode) & (tuned.batch == batch) & (tuned.heads == heads)
              & (tuned.topk == topk) & (tuned.s_q == 1) & (tuned.extra_topk == 0)]
    return r.median_us.median() if len(r) else float("nan")


def row_hbm(heads):
    r = tuned[(tuned.provider == "mma") & (tuned["mode"] == "graph") & (tuned.batch == 64) & (tuned.heads == heads)
              & (tuned.topk == 2048) & (tuned.s_q == 1) & (tuned.extra_topk == 0)]
    return r.frac_hbm.median() if len(r) else float("nan")


head = []
for h, goal in ((16, "speed >= 3x FlashMLA (padded to 64 heads)"), (64, "speed >= 0.7x FlashMLA"), (128, "(no goal)")):
    m, f = t("mma", "graph", 64, h, 2048), t("flashmla", "graph", 64, h, 2048)
    head.append(dict(claim=f"MMA vs FlashMLA, b64 h{h} topk2048 (graph)", mma_us=m, other_us=f, speed_ratio=f / m,
                     goal=goal))
m, s = t("mma", "eager", 64, 64, 2048), t("simt", "eager", 64, 64, 2048)
head.append(dict(claim="MMA vs SIMT, b64 h64 topk2048 (eager)", mma_us=m, other_us=s, speed_ratio=s / m,
                 goal="speed >= 10x SIMT"))
m, f = t("mma", "graph", 1, 64, 512), t("flashmla", "graph", 1, 64, 512)
head.append(dict(claim="MMA at batch 1, h64 topk512 (CUDA graph)", mma_us=m, other_us=f, speed_ratio=f / m,
                 goal="time <= 2x FlashMLA (speed >= 0.5)"))
head.append(dict(claim="MMA share of HBM copy bandwidth, b64 h16 topk2048 (graph)", mma_us=t("mma", "graph", 64, 16, 2048),
                 other_us=float("nan"), speed_ratio=row_hbm(16), goal=">= 0.65"))
headline = pd.DataFrame(head)
save_table(headline, "headline_ratios", out_dir)
print(markdown_table(headline, floatfmt=".3g"))
