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
# # 2. Correctness: both kernels against the fp32 reference and FlashMLA's golden cases
#
# On the CPU this runs the Triton interpreter on small shapes (and a spread of heads on the big
# golden cases for the per-head kernel, whose heads are independent). With `device="cuda"` it runs
# the full grid. The hostile cases are the catalogue's (`workbench.format.cases`), the same ones, by id, that the
# tests and the GPU checks run. The last sections plot the newest committed GPU check table from `data/`
# (every kernel in the registry on the H200, read with `workbench.report.results.load_correctness`) and tabulate the
# newest compute-sanitizer logs (`workbench.report.results.load_sanitizer`).

# %% tags=["parameters"]
device = "cpu"
out_dir = "runs/scratch"   # figures and tables; the pipeline passes its run folder (publishing is its job)
data_dir = "data"          # the committed tables; a relative folder here is from the repository root, wherever
                           # papermill or Jupyter runs the notebook (workbench.report.pipeline.checked_parameters)
fresh = True               # run the kernels here (the GPU table is always read from data/)
heads_grid = [1, 5, 16, 20]
topk_grid = [1, 37, 200]
block_sizes = [2, 61]
s_q = 1
batch = 2
golden_simt_heads = 4      # heads of each golden case the per-head kernel runs on the CPU (all on a GPU)
seed = 0

# %%
import os
import warnings

if device == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"
    # the interpreter runs the kernels' float math in numpy: 1/0 and log2(0) are meant (inf, as on the GPU)
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.runtime\.interpreter")

import itertools
import time

import numpy as np
import pandas as pd
import torch
from IPython.display import Markdown, display

import workbench as wb
from workbench.format import cases
from workbench.format.golden import golden_expected, golden_kwargs, golden_names, load_golden
from workbench.metrics import OUT_ELEM_REL, OUT_ELEM_RMS
from workbench.report.pipeline import checked_parameters
from workbench.report.figures import (commit_provenance, gpu_label, out_folder, record_drawn_gpu, save_figure,
                                      save_table, set_theme)
from workbench.report.plots_correctness import fig_error_ecdf, fig_gpu_checks, fig_worst_by_shape
from workbench.report.provenance import kernels_changed_since
from workbench.report.results import folder_key, load_correctness, load_sanitizer, sanitizer_summary

# the parameters checked and converted in workbench.report.pipeline (booleans from text, folders from the repository
# root, device cuda only on a GPU): a wrong one stops here, in one line
globals().update(checked_parameters("02_correctness", globals()))
set_theme()
out_folder(out_dir)  # refused here, before anything runs, inside data/ or figures/: only publishing adds there
where = "Triton interpreter (CPU)" if device == "cpu" else torch.cuda.get_device_name()

# %% [markdown]
# ## FlashMLA's golden cases

# %%
rows = []
for name in golden_names():
    t0 = time.perf_counter()
    g = load_golden(name)
    h = g["q"].shape[2]
    step = 1 if device != "cpu" else max(1, h // golden_simt_heads)
    outs = {}
    for impl, heads in (("mma", None), ("simt", slice(0, None, step))):
        out, lse = wb.sparse_mla_decode(**golden_kwargs(g, device, heads=heads), impl=impl)
        m = wb.compare(out.float(), lse, *golden_expected(g, heads=heads))
        rows.append(dict(case=name, impl=impl, heads_checked=out.shape[2], **m))
        outs[impl] = out.float()[:, :, slice(0, None, step)] if impl == "mma" else out.float()
    rows[-1]["mma_vs_simt_rel"] = rows[-2]["mma_vs_simt_rel"] = (
        (outs["mma"] - outs["simt"]).norm().item() / outs["simt"].norm().item())
    print(f"{name}: mma {'pass' if rows[-2]['passed'] else 'FAIL'}, simt {'pass' if rows[-1]['passed'] else 'FAIL'} "
          f"({time.perf_counter() - t0:.0f} s)")
golden = pd.DataFrame(rows)
save_table(golden, "correctness_golden", out_dir)
assert golden.passed.all(), golden[~golden.passed]
golden[["case", "impl", "heads_checked", "out_rel_norm", "out_cos_dist", "out_elem_ratio", "lse_ratio", "passed"]]

# %% [markdown]
# ## The hostile catalogue against the fp32 reference
# Every entry of `workbench.format.cases.CATALOGUE` that can be checked here, by its id: shuffled page tables and
# orphan pages, page sizes 2, 61, 64, 69 and 256, -1 and out-of-range indices, all-invalid queries,
# `topk_length` of 0 and past topk, `+inf`/`-inf`/finite sinks, an extra KV scope, non-default `sm_scale`,
# `s_q` = 2. On the CPU the entries with NaN in unselected pages are left to the GPU (the interpreter reads
# fp8 NaN as 480, so a leak would go unseen), and so is the large CUDA-graph case; on a GPU every entry
# runs, then its scaled version.

# %%
here = cases.gpu_cases() if device != "cpu" else cases.catalogue(interpretable=True)
left = [e for e in cases.CATALOGUE if e not in here]
rows = []
for entry in here:
    case = entry.build(device=device)
    ref = wb.sparse_mla_decode_reference(**case.kwargs())
    for impl in ("mma", "simt"):
        out, lse = wb.sparse_mla_decode(**case.kwargs(), impl=impl)
        rows.append(dict(case=entry.id, impl=impl, covers=" ".join(entry.covers),
                         **wb.compare(out.float(), lse, *ref)))
catalogue_df = pd.DataFrame(rows)
save_table(catalogue_df, "correctness_catalogue", out_dir)
assert catalogue_df.passed.all(), catalogue_df[~catalogue_df.passed]
covered = set().union(*(e.covers for e in here))
print(f"{len(here)} catalogue cases x 2 kernels, all passed; features covered here: {len(covered)}/"
      f"{len(cases.FEATURES)}" + (f" (left to the GPU: {sorted(set(cases.FEATURES) - covered)})"
                                  if covered != set(cases.FEATURES) else ""))
for e in left:
    print(f"  on the GPU only: {e.id} ({e.gpu_only})")
catalogue_df.pivot(index="case", columns="impl", values="out_elem_ratio")

# %% [markdown]
# ## A hostile shape grid against the fp32 reference
# The catalogue entry `cases.SHAPE_SWEEP` (mixed sinks, `topk_length`, an all-invalid query, -1 and
# out-of-range indices, non-default `sm_scale`) over heads x topk x page size. No head of a grid row has
# every output forced to zero: a `+inf` sink does exactly that (out = 0 for every query), so the grid
# replaces `+inf` sinks by finite ones and one separate row, `sink=+inf`, exists to test that case. The
# per-element error is shown as a share of the tolerance
# $0.1\,\mathrm{rms}(\mathrm{ref}) + (2.01/128)|\mathrm{ref}|$ (1.0 = at the limit).

# %%
def grid_case(heads, topk, bs, sink):
    case = cases.get(cases.SHAPE_SWEEP).build(device=device, batch=batch, s_q=s_q, heads=heads, topk=topk,
                                              block_size=bs, seed=seed + heads + topk)
    s = case.attn_sink.clone()
    if sink == "-inf and finite":  # "mixed" puts +inf on heads 0, 3, ...: make those finite
        s[s == float("inf")] = torch.linspace(-1.0, 1.0, int((s == float("inf")).sum()), device=s.device)
    elif sink == "+inf":
        s[:] = float("inf")
    case.attn_sink = s
    return case


rows, ratios = [], []
grid = [(h, k, bs, "-inf and finite") for h, k, bs in itertools.product(heads_grid, topk_grid, block_sizes)]
grid.append((min(heads_grid), max(topk_grid), max(block_sizes), "+inf"))  # the row that tests forced zeros
for heads, topk, bs, sink in grid:
    case = grid_case(heads, topk, bs, sink)
    ref_out, ref_lse = wb.sparse_mla_decode_reference(**case.kwargs())
    head_live = ref_out.abs().amax(dim=(0, 1, 3)) > 0  # per head: some query has a nonzero output
    if sink == "+inf":
        assert not head_live.any(), "a +inf sink must force every output of its head to zero"
    else:
        assert head_live.all(), f"heads {(~head_live).nonzero().flatten().tolist()} are zero for every query"
    outs = {}
    for impl in ("mma", "simt"):
        out, lse = wb.sparse_mla_decode(**case.kwargs(), impl=impl)
        outs[impl] = out.float()
        m = wb.compare(out.float(), lse, ref_out, ref_lse)
        if sink == "+inf":
            m["passed"] = bool(m["passed"] and (out == 0).all().item())
        rows.append(dict(heads=heads, topk=topk, block_size=bs, sink=sink, impl=impl, **m))
        if sink != "+inf":
            r = ref_out.double().cpu()
            bound = OUT_ELEM_RMS * r.pow(2).mean().sqrt() + OUT_ELEM_REL * r.abs()
            err = (out.double().cpu() - r).abs()
            e = torch.where(err == 0, torch.zeros_like(err), err / bound.clamp_min(1e-300)).flatten().numpy()
            ratios.append(pd.DataFrame(dict(impl=impl, ratio=e)))
    den = outs["simt"].norm().item()
    rows[-1]["mma_vs_simt_rel"] = rows[-2]["mma_vs_simt_rel"] = (
        (outs["mma"] - outs["simt"]).norm().item() / den if den > 0 else 0.0)
grid_df = pd.DataFrame(rows)
save_table(grid_df, "correctness_grid", out_dir)
assert grid_df.passed.all(), grid_df[~grid_df.passed]
print(f"{len(grid)} grid rows x 2 kernels, all passed; the +inf-sink row returned exact zeros")
grid_df.groupby("impl")[["out_rel_norm", "out_elem_ratio", "lse_ratio"]].max()

# %% [markdown]
# Message: the cumulative share of elements whose error is at most x (an ECDF over every element,
# including the exactly-zero errors, whose share is where each curve starts). A curve that reaches
# 100% left of the dashed line means every element is within tolerance.

# %%
ratio_df = pd.concat(ratios, ignore_index=True)
fig = fig_error_ecdf(ratio_df)
save_figure(fig, "correctness_error_distribution", out_dir, title=f"Per-element error vs fp32 reference: {where}")
zero_share = ratio_df.groupby("impl").ratio.apply(lambda r: float((r == 0).mean()))
zero_share

# %% [markdown]
# Message: the worst element of every (heads, topk) cell, over both page sizes, as a share of the
# tolerance (the `+inf`-sink row is left out: its output is exactly zero).

# %%
fig = fig_worst_by_shape(grid_df[grid_df.sink != "+inf"])
save_figure(fig, "correctness_worst_by_shape", out_dir, title=f"Worst element error by shape (all page sizes): {where}")

# %% [markdown]
# ## Head-batched bf16 MMA vs an fp32 per-head kernel
# A deployment reported that the head-batched bf16-MMA kernel differs from an fp32 per-head
# kernel by a relative error of about 6.7e-3. Our per-head kernel (`simt`) computes in fp32; the MMA
# kernel rounds P to bf16 for the tensor cores (K is exact in bf16: fp8 times a power of two); both
# round the output to bf16. Measured on the golden cases, whose attention is realistic, and on the
# hostile grid, whose wild tile magnitudes make many softmaxes nearly one-hot (and topk=1 exact):

# %%
gold_rel = golden[golden.impl == "mma"].mma_vs_simt_rel
grid_rel = grid_df[(grid_df.impl == "mma") & (grid_df.sink != "+inf")].mma_vs_simt_rel
summary = pd.DataFrame(dict(cases=["golden (FlashMLA inputs)", "hostile grid"],
                            median=[gold_rel.median(), grid_rel.median()], max=[gold_rel.max(), grid_rel.max()]))
save_table(summary, "mma_vs_perhead_fp32", out_dir)
print(f"golden: ||mma - simt|| / ||simt|| median {gold_rel.median():.2e}, max {gold_rel.max():.2e} (report: 6.7e-3)")
summary

# %% [markdown]
# ## The GPU check table (the newest committed in `data/`)
# Message: the worst error of each GPU check against its tolerance, per kernel (every registry
# kernel: the seed `mma`, the ladder rungs and `simt`), on a log axis so that the lse errors (a
# hundred times smaller than the output errors) show; the bitwise checks (CUDA graph vs eager,
# run to run) are counted in the title. The footnote gives the commit the table was measured at;
# older tables stay readable with `load_correctness(name=...)`.

# %%
gpu = load_correctness(data_dir)
gpu_source = gpu.source.iloc[0]
record_drawn_gpu(gpu, "02_correctness", out_dir)  # --publish takes only the reference GPU's figures
gpu_note = commit_provenance(gpu, gpu_source)
print(f"GPU table: {gpu_source}, {len(gpu)} checks, kernels {sorted(gpu.impl.unique())}")
gpu_stale = any(kernels_changed_since(str(c)) for c in gpu.git_commit.unique())
fig, worst = fig_gpu_checks(gpu)
tol_checks = gpu[gpu.out_elem_ratio.notna()]
bit_checks = gpu[gpu.out_elem_ratio.isna()]
save_table(worst.rename(columns={"elem": "worst_elem_ratio", "lse": "worst_lse_ratio"})
           .assign(git_commit=gpu.git_commit.iloc[0], source=gpu_source, stale=gpu_stale), "correctness_gpu_summary",
           out_dir)
save_figure(fig, "correctness_gpu", out_dir,
            title=f"GPU checks: {int(tol_checks.passed.sum())}/{len(tol_checks)} tolerance checks and "
                  f"{int(bit_checks.passed.sum())}/{len(bit_checks)} bitwise checks passed; {gpu_label(gpu)}",
            note=gpu_note)
worst

# %% [markdown]
# ## compute-sanitizer (the newest committed logs in `data/sanitizer_*/`)
# Per kernel, what each tool reported on the sanitizer case (`python -m workbench check --sanitize <kernel>`, a
# small hostile case whose output is also checked against the fp32 reference): memcheck's and synccheck's errors,
# racecheck's reports (each one pair of accesses, covering the many hazards it counts; at most 20 are printed); an
# empty cell is a log without the tool's summary (e.g. timed out). Newest is by the date that ends each folder's
# name, whatever its GPU. Where a tool reports anything, see the folder's README.md (for the warp-specialised
# kernel it maps each report to SASS and to a race-free probe, `scripts/ws_protocol_probe.py`). Read with
# `workbench.report.results.load_sanitizer`.

# %%
san = sanitizer_summary(load_sanitizer(data_dir))
san_table = san.pivot(index="kernel", columns="tool", values="errors").astype("Int64")
san_table["case passed"] = san.groupby("kernel").case_passed.apply(lambda v: bool(v.eq(True).all()))
# each tool's newest log may lie in another folder (a folder's README says which tools it ran): all of them, newest
# first, so that no count is read as the newest folder's when it is an older one's
san_table["folder"] = san.groupby("kernel").folder.agg(lambda f: ", ".join(sorted(set(f), key=folder_key,
                                                                                   reverse=True)))
san_table["stale"] = san.groupby("kernel").stale.apply(lambda v: bool(v.fillna(True).any()))
save_table(san_table.reset_index(), "correctness_sanitizer", out_dir)
san_table

# %% [markdown]
# ## Verdict

# %%
gap = gold_rel.median() / 6.7e-3
lines = [f"**Kernels run here ({where}):** {int(golden.passed.sum())}/{len(golden)} golden checks and "
         f"{int(grid_df.passed.sum())}/{len(grid_df)} grid checks passed; worst element "
         f"{grid_df.out_elem_ratio.max():.3g} of the tolerance (mma {grid_df[grid_df.impl == 'mma'].out_elem_ratio.max():.3g}, "
         f"simt {grid_df[grid_df.impl == 'simt'].out_elem_ratio.max():.3g}).",
         f"- Catalogue ({len(here)} cases here, by id): {int(catalogue_df.passed.sum())}/{len(catalogue_df)} "
         f"checks passed; worst element {catalogue_df.out_elem_ratio.max():.3g} of the tolerance"
         + (f"; {len(left)} GPU-only entries are checked by the GPU table." if left else "."),
         f"- Exactly-zero errors: " + ", ".join(f"{k} {100 * v:.0f}%" for k, v in zero_share.items())
         + " of the elements (no grid head is forced to zero; the +inf-sink row is checked separately).",
         "\n**Claims:**",
         f"- 'the head-batched bf16 MMA kernel differs from an fp32 per-head kernel by about 6.7e-3': "
         + ("confirmed in size" if 0.2 <= gap <= 5 else "refuted") + f" on the golden cases (median "
         f"{gold_rel.median():.2e}, {gap:.2g}x the reported value; max {gold_rel.max():.2e}).",
         f"- 'padding, invalid indices and sinks are exact': "
         + ("confirmed" if grid_df.passed.all() and catalogue_df.passed.all() else "refuted")
         + f" over {len(grid)} grid rows and {len(here)} catalogue cases.",
         f"\n**GPU table ({gpu_source}):** {int(gpu.passed.sum())}/{len(gpu)} checks passed over "
         f"{gpu.impl.nunique()} kernels ("
         + ", ".join(f"{k} {int(g.passed.sum())}/{len(g)}" for k, g in gpu.groupby("impl")) + f"). {gpu_note}"]
gpu_catalogue = sorted(set(gpu.case) & {e.id for e in cases.gpu_cases()})
lines.append(f"- The GPU table holds {len(gpu_catalogue)} of the catalogue's {len(cases.gpu_cases())} GPU cases by id.")
san_lines = []
for tool in ("memcheck", "racecheck", "synccheck"):
    col = san_table[tool] if tool in san_table else pd.Series(dtype="Int64")
    dirty, unknown = col[col.notna() & (col != 0)], col[col.isna()]
    san_lines.append(f"{tool} clean on {int((col == 0).sum())} of {len(col)} kernels" + (
        " (reports on " + ", ".join(f"`{k}`: {v}" for k, v in dirty.items()) + "; see the folder's README.md)"
        if len(dirty) else "") + (f", no summary for {', '.join(unknown.index)}" if len(unknown) else ""))
lines.append(f"\n**compute-sanitizer ({', '.join(sorted(san.folder.unique()))}):** " + "; ".join(san_lines)
             + f"; every case's output passed: {bool(san.case_passed.eq(True).all())}"
             + ("; STALE: logs of other kernel sources than the checkout's" if san_table.stale.any() else "") + ".")
lines.append("\n**Next experiment:** " + (
    "re-run the GPU checks (`scripts/gpu_session.sh`, or `TRITON_INTERPRET=0 pytest -m gpu`) on the checked-out "
    "kernels: " + ("the committed table predates them." if gpu_stale else "the committed table predates the catalogue.")
    if gpu_stale or not gpu_catalogue else "scale the catalogue's GPU cases to production batch sizes (b64, topk 2048)."))
display(Markdown("\n".join(lines)))
