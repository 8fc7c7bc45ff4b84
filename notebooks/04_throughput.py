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
# Everything here is drawn from the current benchmark table of each sweep in `data/` (read with
# `workbench.report.results.load_bench` and chosen by `workbench.report.results.current_rows`, the one rule `data/README.md`
# states; the older tables are history), or from a fresh sweep when a GPU is present and `fresh=True`. Each
# row is one (provider, shape, mode) measurement with median, p20 and p80 over cold-L2 calls, checked
# against the fp32 reference first. "workbench default (auto)" is the default kernel, `impl="auto"`
# (on the H200 a Gluon rung by call size, `wgmma_xchg`, `wgmma_f16`, `wgmma_f16_2cta`, `wgmma_ws` or `wgmma_ws_h64`: `registry.auto_kernel`),
# timed in the current headline table; "seed MMA kernel" is the
# autotuned head-batched Triton kernel the workbench started from (provider "mma"), which is all the
# batch sweeps have. FlashMLA is the peer; the "gather floor", where a table has it, reads the same
# bytes and does no math ("gather": the probe on the decode's split plan, which the claims below divide by;
# "gather_fine", the same kernel on at most 64 tokens a program, is the fastest floor measured). The
# optimisation-ladder and forced-config tables are notebook 5's.
#
# Two timing modes: **CUDA-graph replay** is the kernel's own time (what a server that captures
# graphs sees); **eager** adds the host's launch path and is host-bound below about 32 requests.
# Every figure draws them in separate, labelled panels and states the commit it was measured at.

# %% tags=["parameters"]
device = "cpu"
out_dir = "runs/scratch"   # figures and tables; the pipeline passes its run folder (publishing is its job)
data_dir = "data"          # the committed tables; a relative folder here is from the repository root, wherever
                           # papermill or Jupyter runs the notebook (workbench.report.pipeline.checked_parameters)
fresh = False              # True on a GPU: run the sweep named below now and plot that instead
sweep = "all"
gpu = "NVIDIA H200"        # whose tables in data_dir to draw (results.REFERENCE_GPU; a folder of one other
                           # GPU reads as it is); figures/ holds the H200's, so only it is published

# %%
import os

if device == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"

import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from workbench import registry
from workbench.bench import fit_batch_model, overhead_table, rows_frame, run_sweep
from workbench.report.pipeline import checked_parameters
from workbench.report.figures import (DEFAULT_PROVIDER, PROVIDER_LABELS, bench_provenance, default_kernel_rows,
                                      gpu_label, markdown_table, out_folder, record_drawn_gpu, same_run_times,
                                      save_figure, save_table, set_theme)
from workbench.report.plots_throughput import (fig_batch_model, fig_heads, fig_overhead, fig_production,
                                               fig_roofline, fig_speedups, fig_time_vs_batch,
                                               next_power_of_two_ratios)
from workbench.report.results import current_rows, load_bench

# the parameters checked and converted in workbench.report.pipeline (booleans from text, folders from the repository
# root, device cuda only on a GPU): a wrong one stops here, in one line
globals().update(checked_parameters("04_throughput", globals()))
set_theme()
out_folder(out_dir)  # refused here, before anything runs, inside data/ or figures/: only publishing adds there
if fresh:  # on a GPU (device cuda): checked_parameters refuses fresh=True without one
    path = save_table(rows_frame(run_sweep(sweep)), "bench_fresh", out_dir)
    df = load_bench(paths=[path])
else:
    df = load_bench(data_dir=data_dir)
df = current_rows(df=df, gpu=gpu)  # each sweep's current table (the one rule, data/README.md); the rest is history
ok = df[df.status == "ok"].copy()
ok["config"] = ok.config.fillna("")
rows = default_kernel_rows(ok[~ok.sweep.isin(["ladder", "forced"])])  # the ladder tables are notebook 5's
tuned = rows[rows.config == ""]  # the autotuned kernel and the peers; forced configs are A/B material
label = gpu_label(df)
record_drawn_gpu(df, "04_throughput", out_dir)  # --publish takes only the reference GPU's figures
hbm, gemm = df.hbm_copy_gbps.iloc[0], df.gemm_tflops.iloc[0]
note = bench_provenance(tuned)
stale = "STALE" in note
ignored = sorted(set(ok.kernel) - set(rows.kernel))
print(f"{label}; {len(df)} rows from {sorted(df.source.unique())}, {(df.status != 'ok').sum()} not ok")
print(f"measured in the same run: HBM copy {hbm:.0f} GB/s, bf16 GEMM {gemm:.0f} TFLOP/s")
print(note)
if ignored:
    print(f"left to notebook 5 (optimisation-ladder rungs or unknown providers): {ignored}")
print("providers drawn: " + ", ".join(f"{p} = {PROVIDER_LABELS[p]}" for p in sorted(set(tuned.provider))))
batches = sorted(tuned.batch.unique())

# %% [markdown]
# ## Time against batch, CUDA-graph replay
# The kernel's own time. Lines join only neighbouring measured batch sizes: where graph replay was
# not measured (in the committed table, batch 16 and 32) the line stops rather than guessing.
# Message: the batch curves are the seed MMA kernel's (the only kernel swept over batch); the
# default kernel (`auto`) has one point per panel, at batch 64 where the headline table timed it.
# Compare each with FlashMLA's curve; the Verdict checks which is faster where.

# %%
sel = tuned[tuned.sweep.isin(["batch", "baselines", "headline"]) & (tuned.s_q == 1) & (tuned.extra_topk == 0)]
fig = fig_time_vs_batch(sel, mode="graph", batches=batches)
save_figure(fig, "throughput_time_vs_batch", out_dir, title=f"Sparse MLA decode, s_q=1, page 256, "
            f"CUDA-graph replay: {label}", note=note)

# %% [markdown]
# ## The same sweep, eager (host-bound)
# Read with care: the seed kernel's eager curve is flat at a few hundred microseconds because it
# is host-bound (argument checks, the autotuner's dispatch and two launches of kernels with about 35
# arguments each), not because of the GPU. Shown so that nobody mistakes an eager number for the
# kernel's time; the headline ratios below use graph replay.

# %%
fig = fig_time_vs_batch(sel, mode="eager", batches=batches)
save_figure(fig, "throughput_time_vs_batch_eager", out_dir, title=f"Same sweep, eager launches (host-bound at "
            f"small batch): {label}", note=note)

# %% [markdown]
# ## Production shape and s_q = 2
# The production shape is main topk 128 on 256-token pages plus an extra 512 on 64-token pages.
# Top row graph replay, bottom row eager; the s_q = 2 sweep has eager timings only.

# %%
panels = [("production", 64, "production shape, 64 heads"), ("production", 128, "production shape, 128 heads"),
          ("s_q2", 64, "s_q = 2, topk 2048, 64 heads")]
fig = fig_production(tuned, panels, batches=batches)
save_figure(fig, "throughput_production_and_sq2", out_dir,
            title=f"Production shape and s_q = 2: {label}", note=note)

# %% [markdown]
# ## The seed kernel's speed relative to FlashMLA by head count, and over the per-head kernel
# Speed = the other provider's time / the seed MMA kernel's time (above 1: ours is faster); the
# batch sweeps timed only the seed, so this figure is the seed's. Message: under graph replay the
# seed reaches at best the share of FlashMLA's speed printed below; the SIMT comparison is eager
# only where the table has no graph timing for SIMT, and takes SIMT from another run (the baselines
# sweep) where no table timed both, as its title says. The default kernel's ratios are the headline
# table further down.

# %%
def ratio(a, b, keys, same_run=True):
    # same_run: only tables that timed `a` (one run each); else every current table, b's rows from another run
    same = tuned[tuned.source.isin(tuned[tuned.provider == a].source.unique())] if same_run else tuned
    med = same.groupby(["provider", "mode"] + keys).median_us.median()  # one value per shape and mode
    if a not in med.index.get_level_values(0) or b not in med.index.get_level_values(0):
        return pd.DataFrame(columns=["mode", *keys, f"{b} time / {a} time"])
    return (med.loc[b] / med.loc[a]).dropna().rename(f"{b} time / {a} time").reset_index()


keys = ["batch", "heads", "topk", "s_q", "extra_topk"]
vs_fm = ratio("mma", "flashmla", keys)
vs_fm = vs_fm[(vs_fm.topk == 2048) & (vs_fm.s_q == 1) & (vs_fm.extra_topk == 0)]
vs_simt = ratio("mma", "simt", keys)
simt_runs = "one run"
drawn = set(tuned[tuned.provider == "mma"].source)  # the tables the figure's numbers come from
if vs_simt.empty:  # the baselines sweep times SIMT without the seed: its rows beside the batch sweep's (two runs)
    vs_simt = ratio("mma", "simt", keys, same_run=False)
    simt_runs = "SIMT from another run: " + ", ".join(sorted(tuned[tuned.provider == "simt"].sweep.unique()))
    drawn |= set(tuned[tuned.provider == "simt"].source)
fig = fig_speedups(vs_fm, vs_simt, batches=batches, ours="mma", simt_runs=simt_runs)
save_figure(fig, "throughput_speedups", out_dir, title=f"Seed MMA kernel against FlashMLA and SIMT: {label}",
            note=bench_provenance(tuned[tuned.source.isin(drawn)]))
save_table(vs_fm, "speedup_vs_flashmla", out_dir)
save_table(vs_simt, "speedup_vs_simt", out_dir)
best = vs_fm[vs_fm["mode"] == "graph"].sort_values("flashmla time / mma time").tail(1)
if len(best):
    b = best.iloc[0]
    print(f"seed kernel's best graph-replay speed vs FlashMLA: {b['flashmla time / mma time']:.2f}x at batch {b.batch}, "
          f"{b.heads} heads")

# %% [markdown]
# ## Roofline with the ceilings measured in the same run
# Message: every point sits one to three orders of magnitude under the ceiling; eager points lie
# lowest because the host, not the GPU, sets their time. Arithmetic intensity grows with heads
# (about 3.5 FLOP/byte per head), so each column of points is one head count.

# %%
rf = tuned[tuned.sweep.isin(["batch", "headline"]) & (tuned.s_q == 1)].copy()
rf["intensity"] = rf.flops / rf.bytes
fig = fig_roofline(rf, hbm, gemm)
save_figure(fig, "throughput_roofline", out_dir, title=f"Roofline, s_q=1, all batches and heads: {label}", note=note)

# %% [markdown]
# ## Fixed cost plus cost per request
# Least squares of time against batch, per provider, mode and shape: `time = fixed + per_request *
# batch`. The r² of each fit is written on its bar; a hatched bar is a poor fit (r² < 0.8), whose
# two numbers should not be quoted. Eager fits are poor by nature (host-bound, flat); graph-replay
# fits rest on the batches the table has.

# %%
fit = fit_batch_model(rows)
save_table(fit, "batch_model_fit", out_dir)
show = fit[(fit.topk == 2048) & (fit.s_q == 1) & (fit.extra_topk == 0)].copy()
fig = fig_batch_model(show)
save_figure(fig, "throughput_batch_model", out_dir, title=f"time = fixed + per_request x batch, topk 2048: {label}",
            note=note)
poor = show[show.r2 < 0.8]
print(f"{len(poor)} of {len(show)} fits are poor (r² < 0.8): "
      + ", ".join(f"{PROVIDER_LABELS.get(r.provider, r.provider)} {r['mode']} h{r.heads} ({r.r2:.2f})"
                  for _, r in poor.iterrows()))
show[["provider", "mode", "heads", "fixed_us", "per_request_us", "r2", "points"]]

# %% [markdown]
# ## Headline ratios of the default kernel
# The default kernel is `impl="auto"` (on the H200 a Gluon rung by call size, `wgmma_xchg`, `wgmma_f16`, `wgmma_f16_2cta`, `wgmma_ws` or `wgmma_ws_h64`:
# `registry.auto_kernel`). Each ratio takes our time and the other provider's from the same table (one run): the
# "auto" rows of the current headline table, or, at a shape that table lacks, the rows of another sweep's current
# table (`figures.same_run_times`), of auto or of the rung auto picks there. The SIMT ratio is the exception:
# SIMT was timed only in an older run (the current table of the baseline sweeps), so that ratio mixes runs and
# says so.

# %%
def pick(mode, batch, heads, topk, extra_topk=0, peers=("flashmla", "gather")):
    """Our default's time at a shape: the auto rows, else the rows of the rung auto picks there (on the table's GPU)."""
    rung = registry.auto_kernel(df.capability.iloc[0], heads=heads, tokens=batch * (topk + extra_topk), queries=batch,
                                scopes=2 if extra_topk else 1)
    return same_run_times(ok, mode=mode, batch=batch, heads=heads, topk=topk, extra_topk=extra_topk,
                          ours=(DEFAULT_PROVIDER, rung), peers=peers, gpu=gpu)


def speed(other, ours):
    return other / ours if ours > 0 else float("nan")


def claim_row(claim, r, other_us, ratio, goal, target, note_=""):
    return dict(claim=claim, kernel=r["kernel"], resolved=r["resolved"], ours_us=r["ours_us"], other_us=other_us,
                speed_ratio=ratio,
                goal=goal, target=target, source=r["source"], git_commit=r["git_commit"], stale=r["stale"], note=note_)


head = []
for h, target, goal in ((16, 3.0, "speed >= 3x FlashMLA (padded to 64 heads)"), (64, 0.7, "speed >= 0.7x FlashMLA"),
                        (128, float("nan"), "(no goal)")):
    r = pick("graph", 64, h, 2048)
    head.append(claim_row(f"default vs FlashMLA, b64 h{h} topk2048 (graph)", r, r["flashmla_us"],
                          speed(r["flashmla_us"], r["ours_us"]), goal, target))
r = pick("eager", 64, 64, 2048)
simt = tuned[(tuned.provider == "simt") & (tuned["mode"] == "eager") & (tuned.batch == 64) & (tuned.heads == 64)
             & (tuned.topk == 2048) & (tuned.s_q == 1) & (tuned.extra_topk == 0)]
simt_src = ", ".join(sorted(simt.source.unique()))  # the current table of each sweep that timed SIMT there
simt_us = simt.median_us.median() if len(simt) else float("nan")
head.append(claim_row("default vs SIMT, b64 h64 topk2048 (eager)", r, simt_us, speed(simt_us, r["ours_us"]),
                      "speed >= 10x SIMT", 10.0,
                      f"SIMT from {simt_src} (another run)" if simt_src and simt_src != r["source"] else ""))
r = pick("graph", 1, 64, 512)
head.append(claim_row("default at batch 1, h64 topk512 (graph)", r, r["flashmla_us"],
                      speed(r["flashmla_us"], r["ours_us"]), "time <= 2x FlashMLA (speed >= 0.5)", 0.5))
r = pick("graph", 64, 16, 2048)
row = tuned[(tuned.source == r["source"]) & (tuned.provider == r["kernel"]) & (tuned["mode"] == "graph")
            & (tuned.batch == 64) & (tuned.heads == 16) & (tuned.topk == 2048) & (tuned.s_q == 1) & (tuned.extra_topk == 0)]
if row.empty:  # a fallback rung is not a default-kernel row: read it from the full table
    row = ok[(ok.source == r["source"]) & (ok.provider == r["kernel"]) & (ok["mode"] == "graph") & (ok.batch == 64)
             & (ok.heads == 16) & (ok.topk == 2048) & (ok.s_q == 1) & (ok.extra_topk == 0) & (ok.config == "")]
head.append(claim_row("default share of HBM copy bandwidth, b64 h16 topk2048 (graph)", r, float("nan"),
                      row.frac_hbm.median() if len(row) else float("nan"), ">= 0.65", 0.65))
if np.isfinite(r["gather_us"]):
    head.append(claim_row("gather floor (gather, the decode's plan) vs default, b64 h16 topk2048 (graph)", r,
                          r["gather_us"],
                          speed(r["gather_us"], r["ours_us"]), "(no goal: the floor)", float("nan")))
headline = pd.DataFrame(head)
headline["met"] = np.where(headline.target.notna() & headline.speed_ratio.notna(),
                           headline.speed_ratio >= headline.target, None)
save_table(headline, "headline_ratios", out_dir)
print(markdown_table(headline.drop(columns=["note"]), floatfmt=".3g"))

# %% [markdown]
# ## Host overhead per call: the plain call, the call through a plan, FlashMLA
# Message: what the host adds to each eager call (a synchronised call timed from Python, minus the same call
# replayed from a CUDA graph), from the current `overhead` table, all providers in one run. Issue 10 asks the
# plan path (`plan_decode` once, then `sparse_mla_decode(..., plan=plan)`) for at most 25 us at b1 h64 topk512
# (dashed line).

# %%
over = ok[ok.sweep == "overhead"]  # its current table (current_rows above)
if len(over):
    fig = fig_overhead(over)
    save_figure(fig, "throughput_host_overhead", out_dir, title=f"Host overhead per call: {gpu_label(over)}",
                note=bench_provenance(over))
    overhead = overhead_table(over)
    save_table(overhead, "host_overhead", out_dir)
    print(markdown_table(overhead, floatfmt=".3g"))
else:
    print("no overhead sweep in the data yet (python -m workbench bench --sweep overhead on a GPU)")

# %% [markdown]
# ## Head counts between the powers of two
# Message: a head count that is not a power of two runs padded to a head group; issue 25 asks that heads 20, 24, 40
# and 48 cost no more than the next power of two in the same run (a label's ratio <= 1), from the current `heads`
# table: the default beside FlashMLA, both floors and what auto runs without wgmma, at b8 and b64 topk2048.

# %%
heads_rows = ok[(ok.sweep == "heads") & ok.provider.isin(["auto", "flashmla", "gather", "gather_async", "gather_fine",
                                                                          "auto_portable"])]
if len(heads_rows):
    fig = fig_heads(heads_rows)
    save_figure(fig, "throughput_heads", out_dir, title=f"Time against head count: {gpu_label(heads_rows)}",
                note=bench_provenance(heads_rows))
    pow2 = pd.concat([next_power_of_two_ratios(heads_rows, p) for p in ("auto", "auto_portable")], ignore_index=True)
    save_table(pow2, "heads_vs_next_power_of_two", out_dir)
    print(markdown_table(pow2, floatfmt=".3g"))
else:
    print("no heads sweep in the data yet (python -m workbench bench --sweep heads on a GPU)")

# %% [markdown]
# ## Verdict

# %%
goals = headline[headline.target.notna()]
lines = []
used = headline.groupby(["kernel", "source", "git_commit"], dropna=False).agg(
    stale=("stale", "first"), resolved=("resolved", lambda v: ", ".join(sorted(set(map(str, v)))))).reset_index()
lines.append("**Default kernel (`impl=\"auto\"`), measured in:** " + "; ".join(
    f"{'auto' if u.kernel == 'auto' else u.kernel} rows (ran {u.resolved}) of {u.source} at commit {u.git_commit}"
    + (" (STALE: the kernel sources changed since)" if u.stale else " (kernel sources unchanged since)")
    for u in used.itertuples()) + ".")
lines.append(f"The batch-sweep figures above draw the seed MMA kernel: {note}")
n_met = int((goals.met == True).sum())  # noqa: E712
n_known = int(goals.met.notna().sum())
lines.append(f"\n**Goals: {n_met} of {len(goals)} met**" + (f" ({len(goals) - n_known} not measured)"
                                                               if n_known < len(goals) else "") + ".")
for _, r in goals.iterrows():
    extra = f" ({r.note})" if r.note else ""
    if r.met is None:
        lines.append(f"- not measured: {r.claim} (goal {r.goal})")
    elif r.met:
        lines.append(f"- met: {r.claim}: {r.speed_ratio:.3g} against {r.goal}{extra}")
    else:
        lines.append(f"- **missed** by {r.target / r.speed_ratio:.1f}x: {r.claim}: {r.speed_ratio:.3g} "
                     f"against {r.goal}{extra}")
# the claims this notebook's text makes, checked against its own numbers
eager_b1, graph_b1 = pick("eager", 1, 64, 512), pick("graph", 1, 64, 512)
host = speed(eager_b1["ours_us"], graph_b1["ours_us"])
lines.append("\n**Claims:**")
lines.append(f"- 'eager timings of the default kernel are host-bound at small batch': "
             f"{'confirmed' if host > 3 else 'refuted' if np.isfinite(host) else 'not measured'} "
             f"(batch 1, h64, topk 512: eager {eager_b1['ours_us']:.0f} us, graph {graph_b1['ours_us']:.0f} us, "
             f"{host:.1f}x)")
gr = vs_fm[vs_fm["mode"] == "graph"]["flashmla time / mma time"]
if len(gr):
    lines.append(f"- 'FlashMLA is faster than the seed MMA kernel at every graph-replay shape of the batch sweep': "
                 f"{'confirmed' if (gr < 1).all() else 'refuted'} (seed speed {gr.min():.2f}x to {gr.max():.2f}x of "
                 f"FlashMLA over {len(gr)} shapes)")
dg = headline[headline.claim.str.startswith("default vs FlashMLA") & headline.speed_ratio.notna()]
if len(dg):
    lines.append(f"- 'FlashMLA is faster than the default kernel at every b64 headline shape': "
                 f"{'confirmed' if (dg.speed_ratio < 1).all() else 'refuted'} (default speed "
                 + ", ".join(f"{v:.2f}x" for v in dg.speed_ratio) + " of FlashMLA at 16, 64, 128 heads)")
lines.append(f"- batch model: {len(poor)} of {len(show)} fits have r² < 0.8; their fixed and per-request parts "
             "are not usable numbers" + (" (all eager)" if len(poor) and (poor["mode"] == "eager").all() else ""))
missed = goals[goals.met == False]  # noqa: E712
lines.append("\n**Next experiment:**")
lines.append("- The batch sweep has only the seed kernel: sweep the default kernel over batch (graph and eager, "
             "`python -m workbench bench` on the H200) so that these curves describe the code a user runs.")
if len(missed):
    worst = missed.assign(gap=missed.target / missed.speed_ratio).sort_values("gap").iloc[-1]
    lines.append(f"- The largest miss is {worst.claim} ({worst.gap:.1f}x short); notebook 5 (the optimisation "
                 "ladder) breaks the default kernel's time down by rung, against the gather floor, with the "
                 "Nsight Compute profiles.")
verdict = "\n".join(lines)
display(Markdown(verdict))
