"""Every notebook runs through the papermill pipeline on the CPU with tiny parameters and writes what it promises."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from workbench import pipeline

ROOT = Path(__file__).resolve().parents[1]
PROMISED = {
    "01_padding_derivation": ["padding_costs.png", "padding_costs.svg", "padding_costs.csv", "page_byte_map.png",
                              "page_byte_map.svg", "page_byte_map.csv"],
    "02_correctness": ["correctness_error_distribution.png", "correctness_worst_by_shape.png", "correctness_gpu.png",
                       "correctness_golden.csv", "correctness_grid.csv", "mma_vs_perhead_fp32.csv",
                       "correctness_gpu_summary.csv"],
    "03_occupancy": ["occupancy_shared_memory.png", "occupancy_registers.png", "pruning_model_vs_compiled.png",
                     "warps_4_vs_8.png", "sm120_fit_by_tile.csv", "pruning_model_vs_compiled.csv",
                     "warps_4_vs_8_resources.csv"],
    "04_throughput": ["throughput_time_vs_batch.png", "throughput_time_vs_batch_eager.png", "throughput_production_and_sq2.png", "throughput_speedups.png",
                      "throughput_roofline.png", "throughput_batch_model.png", "headline_ratios.csv",
                      "batch_model_fit.csv", "throughput_host_overhead.png", "host_overhead.csv"],
    "05_optimization_ladder": ["ladder_time_per_rung.png", "ladder_time_per_rung.svg", "ladder_b1_and_production.png",
                               "ladder_measurements.csv", "ladder_prediction_vs_measurement.csv",
                               "ladder_wgmma_history.csv", "ladder_autotuner_check.csv", "ladder_ncu.csv",
                               "ladder_goals.csv"],
}


def _run(args, **kw):
    return subprocess.run([sys.executable, "-m", "workbench", "notebooks", "--no-progress", *args], cwd=ROOT,
                          capture_output=True, text=True, **kw)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    r = _run(["-f", "notebooks/tiny.yaml", "--runs-dir", str(runs)])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (run_dir,) = list(runs.iterdir())
    return run_dir


@pytest.mark.parametrize("name", list(PROMISED))
def test_notebook_writes_its_figures_and_tables(tiny_run, name):
    assert (tiny_run / f"{name}.ipynb").exists(), "the executed notebook is kept"
    for f in PROMISED[name]:
        path = tiny_run / "figures" / f
        assert path.exists() and path.stat().st_size > 0, f"{name} did not write {f}"


def _graph_row(table, provider, batch, heads, topk, extra_topk=0):
    import pandas as pd
    bench = pd.read_csv(ROOT / "data" / table)
    kernel = bench.kernel.fillna(bench.provider) if "kernel" in bench else bench.provider
    who = bench.provider if provider == "auto" else kernel  # auto rows record the rung they ran as their kernel
    sel = bench[(who == provider) & (bench["mode"] == "graph") & (bench.batch == batch) & (bench.heads == heads)
                & (bench.topk == topk) & (bench.config.isna()) & (bench.s_q == 1) & (bench.extra_topk == extra_topk)]
    assert len(sel), (table, provider, batch, heads, topk)
    return sel.median_us.median()


def test_headline_numbers_come_from_data(tiny_run):
    """Notebook 04's ratios are the default kernel's ('auto' rows), with the table and commit they came from."""
    import pandas as pd
    head = pd.read_csv(tiny_run / "figures" / "headline_ratios.csv")
    row = head[head.claim.str.contains("b64 h64") & head.claim.str.contains("FlashMLA")].iloc[0]
    assert row.kernel == "auto" and row.source.endswith("_headline.csv")
    assert row.ours_us == pytest.approx(_graph_row(row.source, "auto", 64, 64, 2048))
    assert row.other_us == pytest.approx(_graph_row(row.source, "flashmla", 64, 64, 2048))
    from workbench.results import load_bench  # the table's commit as data/errata.csv leaves it
    published = load_bench(data_dir=ROOT / "data")
    assert str(row.git_commit) == str(published[published.source == row.source].git_commit.iloc[0])


def test_ladder_numbers_come_from_data(tiny_run):
    """Notebook 05's per-rung times and goal inputs are the committed tables' numbers, not typed in."""
    import pandas as pd
    meas = pd.read_csv(tiny_run / "figures" / "ladder_measurements.csv")
    table = meas.source.iloc[0]
    assert table.endswith("_ladder.csv")
    for kernel, (b, h, k, e), key in (("wgmma", (64, 16, 2048, 0), "h16"), ("mma", (64, 64, 2048, 0), "h64"),
                                      ("tile512", (1, 64, 512, 0), "b1"), ("wgmma", (64, 16, 128, 512), "prod")):
        r = meas[(meas.kernel == kernel) & (meas.key == key)].iloc[0]
        us = _graph_row(table, kernel, b, h, k, e)
        assert r.us == pytest.approx(us)
        assert r.speed_vs_flashmla == pytest.approx(_graph_row(table, "flashmla", b, h, k, e) / us)
        assert r.time_over_floor == pytest.approx(us / _graph_row(table, "gather", b, h, k, e))
    goals = pd.read_csv(tiny_run / "figures" / "ladder_goals.csv")
    assert len(goals) == 6
    from workbench import registry
    shapes = {"b64 h16 topk2048": (64, 16, 2048), "b64 h64 topk2048": (64, 64, 2048),
              "b64 h128 topk2048": (64, 128, 2048), "b1 h64 topk512": (1, 64, 512),
              "b64 h16 main 128@256 + extra 512@64": (64, 16, 640)}
    for r in goals.itertuples():  # the auto rows, or the rows of the rung auto's rule picks at that shape
        b, h, tokens = shapes[r.shape]
        assert r.kernel in ("auto", registry.auto_kernel("sm_90", heads=h, tokens=b * tokens)), r.shape
    g = goals[goals["shape"].str.startswith("b64 h16 topk2048")].iloc[0]
    assert g.ours_us == pytest.approx(_graph_row(g.source, g.kernel, 64, 16, 2048))
    assert g.flashmla_us == pytest.approx(_graph_row(g.source, "flashmla", 64, 16, 2048))
    ncu = pd.read_csv(tiny_run / "figures" / "ladder_ncu.csv")
    assert len(ncu) == len(list((ROOT / "data" / "ncu").glob("*_ncu_*.txt")))
    assert ncu.registers.notna().all() and ncu.duration_us.notna().all()


def test_every_run_gets_a_new_folder(tmp_path):
    a, b = pipeline.new_run_dir(tmp_path), pipeline.new_run_dir(tmp_path)
    assert a != b and a.exists() and b.exists()


def test_failing_notebook_exits_nonzero_and_keeps_the_executed_copy(tmp_path):
    r = _run(["--only", "03", "-p", "data_dir", str(tmp_path / "missing"), "--runs-dir", str(tmp_path)])
    assert r.returncode != 0
    assert "FAILED: 03_occupancy.ipynb" in r.stderr
    (run_dir,) = [p for p in tmp_path.iterdir() if p.name != "missing"]
    assert (run_dir / "03_occupancy.ipynb").exists()


def test_unknown_parameter_is_refused(tmp_path):
    r = _run(["--only", "01", "-f", str(_yaml(tmp_path, {"01_padding_derivation": {"no_such_knob": 1}})),
              "--runs-dir", str(tmp_path / "runs")])
    assert r.returncode != 0 and "no_such_knob" in (r.stderr + r.stdout)


def test_fresh_without_cuda_fails_loudly(tmp_path):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine can measure")
    r = _run(["--only", "04", "-p", "fresh", "true", "--runs-dir", str(tmp_path)])
    assert r.returncode != 0
    assert "needs a CUDA GPU" in r.stderr + r.stdout


@pytest.mark.parametrize("nb", sorted((ROOT / "notebooks").glob("0*.ipynb")), ids=lambda p: p.stem)
def test_default_output_is_a_scratch_folder(nb):
    import papermill as pm
    default = pm.inspect_notebook(str(nb))["out_dir"]["default"].strip("\"'")
    assert "figures" not in default and default.startswith("../runs/"), default


def _tree(*dirs):
    """{path: size, or "dir"} of everything under dirs: what a refused run must leave as it was."""
    return {str(p.relative_to(ROOT)): p.stat().st_size if p.is_file() else "dir"
            for d in dirs for p in sorted((ROOT / d).rglob("*"))}


@pytest.mark.parametrize("where", ["figures", "data/new", "notebooks/../data", "figures/"])
def test_save_helpers_refuse_data_and_figures_in_one_line(where, monkeypatch):
    """The package functions every notebook writes through (and calls first, out_folder) refuse data/ and figures/
    however the notebook is run; in a notebook the error shows as one line, not a traceback."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from workbench.pipeline import RefusedOutput
    from workbench.plotting import out_folder, save_figure, save_table
    monkeypatch.chdir(ROOT)
    before = _tree("data", "figures")
    fig = plt.figure()
    for call in (lambda: out_folder(where), lambda: save_table(pd.DataFrame({"a": [1]}), "refused", where),
                 lambda: save_figure(fig, "refused", where)):
        with pytest.raises(RefusedOutput, match=r"only publishing adds to (data|figures)/") as e:
            call()
        assert str(e.value).startswith(f"out_dir {where}: is inside ") and "\n" not in str(e.value)
        assert e.value._render_traceback_() == [f"RefusedOutput: {e.value}"]
    plt.close(fig)
    assert _tree("data", "figures") == before


@pytest.mark.parametrize("nb", sorted((ROOT / "notebooks").glob("0*.ipynb")), ids=lambda p: p.stem)
def test_plain_papermill_refuses_out_dir_in_data_or_figures_before_computing(nb, tmp_path):
    """papermill without the pipeline: the notebook's own first cell (out_folder) refuses, in one line."""
    where = "../figures" if int(nb.stem[:2]) % 2 else "../data/new"  # both folders across the five
    before = _tree("data", "figures")
    executed = tmp_path / nb.name
    r = subprocess.run([sys.executable, "-m", "papermill", str(nb), str(executed), "-p", "out_dir", where, "--cwd",
                        str(ROOT / "notebooks"), "-k", pipeline.KERNEL, "--no-progress-bar"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    folder = where.split("/")[1]
    assert r.returncode != 0
    assert f"RefusedOutput: out_dir {where}: is inside {folder}/" in r.stderr, r.stderr[-3000:]
    cells = [c for c in json.loads(executed.read_text())["cells"] if c["cell_type"] == "code"]
    errors = [(i, o) for i, c in enumerate(cells) for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert len(errors) == 1, errors
    i, error = errors[0]
    assert error["ename"] == "RefusedOutput" and len(error["traceback"]) == 1, error["traceback"]
    assert "out_folder(out_dir)" in "".join(cells[i]["source"]), "refused by the set-up cell"
    assert all(c.get("execution_count") is None for c in cells[i + 1:]), "nothing after it ran"
    assert _tree("data", "figures") == before


def test_executed_notebooks_end_in_a_verdict_without_noise(tiny_run):
    for name in PROMISED:
        nb = json.loads((tiny_run / f"{name}.ipynb").read_text())
        heads = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "markdown"
                 and "".join(c["source"]).strip().startswith("## Verdict")]
        assert heads, f"{name} has no Verdict section"
        after = [c for c in nb["cells"][heads[-1]:] if c["cell_type"] == "code"]
        shown = "".join("".join(o.get("data", {}).get("text/markdown", "")) for c in after for o in c["outputs"])
        assert "**" in shown or "confirmed" in shown, f"{name}: the verdict cell shows nothing"
        stderr = "".join("".join(o.get("text", "")) for c in nb["cells"] if c["cell_type"] == "code"
                         for o in c.get("outputs", []) if o.get("name") == "stderr")
        for noise in ("IProgress not found", "RuntimeWarning", "TqdmWarning"):
            assert noise not in stderr, f"{name}: {noise} in the executed notebook"


def _yaml(tmp_path, obj):
    p = tmp_path / "p.yaml"
    p.write_text(json.dumps(obj))  # JSON is YAML
    return p


@pytest.mark.parametrize("nb", sorted((ROOT / "notebooks").glob("0*.ipynb")), ids=lambda p: p.stem)
def test_committed_notebooks_are_clean_paired_and_parameterised(nb):
    import jupytext
    data = json.loads(nb.read_text())
    code = [c for c in data["cells"] if c["cell_type"] == "code"]
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code), "strip outputs"
    assert "parameters" in code[0]["metadata"].get("tags", []), "first code cell is the parameters cell"
    assert "import workbench" not in "".join(code[0]["source"])
    src = "".join("".join(c["source"]) for c in code)
    first_import = re.search(r"^(import workbench|from workbench)", src, re.M)
    assert first_import and src.index("TRITON_INTERPRET") < first_import.start(), "interpreter switch precedes the import"
    assert "@triton.jit" not in src, "notebooks call the package; they define no kernels"
    paired = jupytext.read(nb.with_suffix(".py"))
    assert [c.source for c in paired.cells] == [c.source for c in jupytext.read(nb).cells], "run jupytext --sync"
    assert data["metadata"]["kernelspec"]["name"] == "mla-workbench"
