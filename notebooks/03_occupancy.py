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
# # 3. Registers, shared memory and occupancy of every config, per target
#
# Every config of the head-batched kernel's space was compiled for each target with no GPU
# (`python -m workbench resources --arch ARCH --kernel all`); registers and spills come from the
# cubin, the MMA kind from the SASS. This notebook reads those tables from `data/` (or compiles a
# few configs afresh with `fresh=True`) and joins them with the H200 timings. Its last section is a projection, not
# a measurement: what the H200 tables, the sm_120 lab table and NVIDIA's spec say about the portable default on an
# sm_120 GPU (RTX PRO 6000 Blackwell).

# %% tags=["parameters"]
device = "cpu"
out_dir = "runs/scratch"   # figures and tables; the pipeline passes its run folder (publishing is its job)
data_dir = "data"          # the committed tables; a relative folder here is from the repository root, wherever
                           # papermill or Jupyter runs the notebook (workbench.report.pipeline.checked_parameters)
fresh = False              # True: compile `fresh_configs` now and set them beside the committed numbers
archs = ["sm_120", "sm_90"]
fresh_configs = [{"BLOCK_H": 64, "BLOCK_T": 16, "num_warps": 8, "num_stages": 1, "PREFETCH": 0}]

# %%
import os

if device == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"

import pandas as pd
from IPython.display import Markdown, display

import workbench as wb
from workbench.kernels.configs import TiledConfig
from workbench.kernels.mma import MMA_CONFIG_SPACE, mma_prune_reason
from workbench.report.pipeline import checked_parameters
from workbench.report.figures import (bench_provenance, commit_provenance, gpu_label, out_folder, record_drawn_gpu,
                                      save_figure, save_table, set_theme)
from workbench.report.plots_occupancy import fig_pruning, fig_registers, fig_shared_memory, fig_warps
from workbench.lab.resources import apply_model, lab_frame
from workbench.report.results import current_rows, data_file, load_bench, parse_config
from workbench.lab.targets import get_target

# the parameters checked and converted in workbench.report.pipeline (booleans from text, folders from the repository
# root, device cuda only on a GPU): a wrong one stops here, in one line
globals().update(checked_parameters("03_occupancy", globals()))
set_theme()
out_folder(out_dir)  # refused here, before anything runs, inside data/ or figures/: only publishing adds there
# the lab tables from data_dir, else from data/ (compiled on a CPU: the same for every GPU; a run folder of bench
# tables has none of its own)
lab_paths = [data_file(f"resources_{a}.csv", data_dir) for a in archs]
print("lab tables:", ", ".join(str(p) for p in lab_paths))
lab = pd.concat([pd.read_csv(p) for p in lab_paths], ignore_index=True)
lab = apply_model(lab)  # the pruning model's verdicts from the current code; compiled numbers from data/
# the rows of kernels still registered say which code the figures describe; a removed rung's rows stay in the
# tables as history and neither stale nor vouch for them (the rule of results.current_tables)
lab_note = commit_provenance(lab[lab.kernel.isin(wb.registry.names())], "resources_*.csv")
if fresh:  # cross-compiling needs no GPU; the fresh numbers are shown beside the committed ones
    new = pd.concat([lab_frame(a, "mma", fresh_configs) for a in archs], ignore_index=True)
    both = new.merge(lab, on=["arch", "config"], how="left", suffixes=("_fresh", "_data"))
    print(both[["arch", "config", "status_fresh", "shared_bytes_fresh", "shared_bytes_data", "registers_fresh",
                "registers_data", "spill_stores_fresh", "spill_stores_data"]].to_string())
mma = lab[lab.kernel == "mma"].copy()
mma["PREFETCH"] = [int(parse_config(c).get("PREFETCH", 0)) for c in mma.config]
for c in ("BLOCK_H", "BLOCK_T"):
    mma[c] = mma[c].astype(int)
mma["tile"] = "H" + mma.BLOCK_H.astype(str) + " T" + mma.BLOCK_T.astype(str)
limits = {a: get_target(a).smem_per_block for a in archs}
print(f"{len(mma)} MMA configs per target:", mma.groupby("arch").size().to_dict())
print("triton", lab.triton.iloc[0])
print(lab_note)

# %% [markdown]
# ## Shared memory per config, against each target's per-block limit
# Message: which tiles a target's per-block limit admits (dashed line, in KB like the bytes); the
# 99 KB of sm_120 cuts off the large tiles that the 227 KB of sm_90 still holds.

# %%
fig = fig_shared_memory(mma, archs, limits, {a: f"{a} ({get_target(a).example_gpu})" for a in archs})
save_figure(fig, "occupancy_shared_memory", out_dir, title="MMA kernel shared memory per config (cross-compiled)",
            note=lab_note)

# %% [markdown]
# ## Registers, spills and occupancy
# Message: how many configs sit at the 255-register ceiling (dashed, labelled) and spill, and how
# few warps stay resident per SM; the Verdict counts the configs at 255 registers.

# %%
fig = fig_registers(mma, archs)
save_figure(fig, "occupancy_registers", out_dir, title="MMA kernel registers, spills and occupancy (cross-compiled)",
            note=lab_note)

# %% [markdown]
# ## The sm_120 report: which tiles fit in 99 KB?
# A deployment on sm_120 reported that BLOCK_T = 32 configs exceed the ~99 KB per-block limit
# while BLOCK_T = 16 with 8 warps fits. For this project's kernel:

# %%
t120 = mma[mma.arch == "sm_120"]
fit_table = (t120.assign(fits=t120.status.isin(["fits", "pruned"]) & (t120.shared_bytes <= limits["sm_120"]))
             .pivot_table(index=["BLOCK_H", "BLOCK_T"], columns="num_warps", values="fits", aggfunc="mean"))
fit_table.columns = [f"{w} warps: share that fits" for w in fit_table.columns]
save_table(fit_table.reset_index(), "sm120_fit_by_tile", out_dir)
fit_table

# %% [markdown]
# ## The pruning model against the compiler
# Autotuning prunes with a shared-memory model before compiling anything. Here the model's
# verdict (per target, heads not considered) meets the compiled numbers: a config the model keeps
# must fit when compiled, and one it prunes should be over the limit. Message: points on the
# diagonal are exact estimates; a blue cross (kept but over) would be a model bug.

# %%
rows = []
for arch in archs:
    t = get_target(arch)
    for cfg in MMA_CONFIG_SPACE:
        est, reason = mma_prune_reason(cfg, 0, t)
        c = mma[(mma.arch == arch) & (mma.config == TiledConfig.from_triton(cfg).label)]
        if c.empty:
            continue
        c = c.iloc[0]
        rows.append(dict(arch=arch, config=c.config, model_bytes=est, compiled_bytes=c.shared_bytes,
                         model="prune" if reason else "keep",
                         compiled="over" if c.shared_bytes > t.smem_per_block else "fits"))
agree = pd.DataFrame(rows)
save_table(agree, "pruning_model_vs_compiled", out_dir)
confusion = pd.crosstab([agree.arch, agree.model], agree.compiled)
bad_keep = agree[(agree.model == "keep") & (agree.compiled == "over")]
needless_prune = agree[(agree.model == "prune") & (agree.compiled == "fits")]
print(f"kept by the model but over the limit when compiled: {len(bad_keep)}; pruned but would fit: "
      f"{len(needless_prune)}")
fig = fig_pruning(agree, archs, limits)
save_figure(fig, "pruning_model_vs_compiled", out_dir, title="Shared-memory model vs compiler, every MMA config",
            note=lab_note)
confusion

# %% [markdown]
# ## BLOCK_T = 16: 4 warps against 8
# The same report estimated about 255 versus 150 registers per thread. Left: the compiled registers
# of each real config (PREFETCH 0 and 1 are separate configs, never averaged). Middle: the forced-
# config A/B under CUDA-graph replay, at the one batch size the table has it for (64). Right: the
# eager sweep over batch, labelled as such: it is host-bound below about 32 requests, so only its
# large batches compare the kernels themselves.

# %%
ab = mma[(mma.BLOCK_T == 16) & (mma.num_stages == 1)][
    ["arch", "BLOCK_H", "num_warps", "PREFETCH", "config", "registers", "spill_stores", "warps_per_sm", "occupancy",
     "limiter"]]
save_table(ab, "warps_4_vs_8_resources", out_dir)
bench = current_rows(["configs", "warps"], df=load_bench(data_dir=data_dir))  # each sweep's current table
mma_rows = bench[(bench.provider == "mma") & (bench.kernel == "mma") & (bench.status == "ok")]
graph_ab = mma_rows[(mma_rows.sweep == "configs") & (mma_rows["mode"] == "graph") & (mma_rows.BLOCK_T == 16)
                    & (mma_rows.num_stages == 1)]
eager_ab = mma_rows[(mma_rows.sweep == "warps") & (mma_rows["mode"] == "eager")]
regs90 = ab[ab.arch == "sm_90"]
warps_note = ""  # the timed half's provenance, when there is one
if graph_ab.empty and eager_ab.empty:  # a run folder of other sweeps: the lab's half alone is the table above
    print(f"no configs or warps sweep in {data_dir}: the 4 vs 8 warps figure is not drawn")
else:
    warps_note = " ".join([lab_note, bench_provenance(pd.concat([graph_ab, eager_ab]))])
    fig = fig_warps(regs90, graph_ab, eager_ab)
    save_figure(fig, "warps_4_vs_8", out_dir, title=f"BLOCK_T=16, 4 vs 8 warps, topk 2048: {gpu_label(bench)}",
                note=warps_note)
regs90.pivot_table(index=["BLOCK_H", "PREFETCH"], columns="num_warps", values="registers")

# %% [markdown]
# ## sm_120 projection: a PROJECTION from the H200, the lab and NVIDIA's spec, not a measurement
# No sm_120 GPU has run these kernels for this table. Per headline shape (from the current headline table):
# (a) the H200 proxy, the graph-replay time (median, p20-p80) of `auto_portable`, which runs what `auto` picks on a
# GPU without wgmma (`registry.auto_kernel("sm_120", ...)`), and the kernel its rows record; (b) the sm_120 memory
# floor, the decode's bytes (the table's `bytes`, the count its GB/s use) over the RTX PRO 6000 Blackwell's
# 1,792 GB/s (`targets.py`, NVIDIA's spec), beside the H200's measured floors of the same table (gather_async,
# gather) and its bytes over the H200's measured copy rate; (c) the lab's resident warps per SM on sm_120 for that
# kernel's config there: the config its autotuner keeps on sm_120 (its prune hook budgeted for sm_120), which for
# tile512 at 64 heads is not the one the H200's autotuner picks (the black tick: the H200 time of the sm_120 config,
# from the forced sweep, where it timed it). Message: how far each proxy time sits above what sm_120's memory
# allows, and how few warps the portable kernels keep resident there.

# %%
from workbench.report.plots_occupancy import fig_projection, sm120_projection  # noqa: E402

sm120 = get_target("sm_120")
timed = load_bench(data_dir=data_dir)
headline = current_rows("headline", df=timed)  # the headline sweep's current table (data/README.md: one rule)
forced_rows = current_rows(["forced"], df=timed)
# --publish takes only the reference GPU's figures
record_drawn_gpu(pd.concat([bench, headline, forced_rows]), "03_occupancy", out_dir)
lab120 = pd.read_csv(data_file("resources_sm_120.csv", data_dir))  # whatever `archs` holds
proj = sm120_projection(headline, lab120, sm120, forced=forced_rows)
proj_lab = lab120[lab120.kernel.isin(set(proj.kernel))]
proj_note = " ".join([
    "PROJECTION, not a measurement: H200 times of the kernels auto runs on sm_120; sm_120 floor = bytes / "
    f"{sm120.dram_gbps:,.0f} GB/s (NVIDIA's spec of the {sm120.example_gpu}); occupancy from the lab "
    "(cross-compiled, no GPU).", bench_provenance(headline), commit_provenance(proj_lab, "resources_sm_120.csv")])
save_table(proj, "projection_sm120", out_dir)
fig = fig_projection(proj, sm120, h200=str(headline.gpu.iloc[0]).replace("NVIDIA ", ""))
save_figure(fig, "projection_sm120", out_dir,
            title=f"PROJECTION, not a measurement: the portable default on sm_120 ({sm120.example_gpu})",
            note=proj_note)
print(proj_note)
proj[["shape", "kernel", "proxy_us", "proxy_p20_us", "proxy_p80_us", "target_floor_us", "proxy_over_target_floor",
      "h200_gather_async_us", "h200_gather_us", "h200_copy_floor_us", "target_configs", "warps_per_sm_max",
      "occupancy_max", "limiter", "h200_us_of_target_config"]]

# %% [markdown]
# ## Verdict

# %%
lines = [lab_note]
over32 = t120[(t120.BLOCK_T == 32)]
over32_share = float((over32.shared_bytes > limits["sm_120"]).mean())
fit16_8 = t120[(t120.BLOCK_T == 16) & (t120.num_warps == 8)]
fit16_8_share = float((fit16_8.shared_bytes <= limits["sm_120"]).mean())
c1 = over32_share == 1.0
c2 = fit16_8_share == 1.0
lines.append("\n**Claims:**")
lines.append(f"- sm_120 report, 'BLOCK_T = 32 exceeds ~99 KB': {'confirmed' if c1 else 'refuted'} for this kernel: "
             f"{100 * over32_share:.0f}% of its BLOCK_T = 32 configs are over (those with BLOCK_H "
             f"{sorted(set(over32[over32.shared_bytes > limits['sm_120']].BLOCK_H))}).")
lines.append(f"- sm_120 report, 'BLOCK_T = 16 with 8 warps fits': {'confirmed' if c2 else 'refuted'}: "
             f"{100 * fit16_8_share:.0f}% of those configs fit (over the limit: BLOCK_H "
             f"{sorted(set(fit16_8[fit16_8.shared_bytes > limits['sm_120']].BLOCK_H))}).")
r = regs90.pivot_table(index=["BLOCK_H", "PREFETCH"], columns="num_warps", values="registers")
if {4, 8} <= set(r.columns):
    pairs = ", ".join(f"H{h} pf{p}: {int(r.loc[(h, p), 4])} vs {int(r.loc[(h, p), 8])}" for h, p in r.index)
    near = ((r[4] >= 240) & (r[8] <= 170)).any()
    lines.append(f"- '4 warps need about 255 registers, 8 warps about 150': {'confirmed for some' if near else 'refuted'}"
                 f" configs (sm_90, 4 vs 8 warps: {pairs}).")
lines.append(f"- pruning model, 'a kept config fits when compiled': "
             f"{'confirmed' if bad_keep.empty else 'refuted'} ({len(bad_keep)} kept but over, "
             f"{len(needless_prune)} pruned but would fit, of {len(agree)}).")
if len(graph_ab):
    best = graph_ab.sort_values("median_us").groupby("heads").head(1)
    lines.append("- fastest forced BLOCK_T = 16 config under graph replay, batch 64: " + "; ".join(
        f"{int(b.heads)} heads: {int(b.num_warps)} warps, PREFETCH {int(b.PREFETCH)} ({b.median_us:.0f} us)"
        for _, b in best.sort_values("heads").iterrows()))
at255 = float((mma.registers >= 255).mean())
lines.append(f"\n{100 * at255:.0f}% of the compiled MMA configs use all 255 registers.")
lines.append("\n**Next experiment:** graph-replay the BLOCK_T = 16 warps A/B at every batch size (the table has it "
             "at batch 64 only), and compile the configs that sit at 255 registers with a smaller accumulator tile "
             "to see whether the spills, not the tile, set the time.")
lines.append("\n**sm_120 projection (a PROJECTION, not a measurement):** " + "; ".join(
    f"{r.shape}: {r.kernel or 'n/a'} {r.proxy_us:.1f} us on the H200 against an sm_120 floor of "
    f"{r.target_floor_us:.2g} us ({r.proxy_over_target_floor:.1f}x), {r.warps_per_sm_max:.0f} of "
    f"{r.max_warps_per_sm} warps resident on sm_120 ({r.limiter})" for r in proj.itertuples()) + ".")
if "STALE" in warps_note:
    lines.append("The timings predate the current kernel sources: re-measure before acting on them.")
display(Markdown("\n".join(lines)))
