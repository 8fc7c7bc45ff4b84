"""Every notebook runs through the papermill pipeline on the CPU with tiny parameters and writes what it promises;
plain papermill runs them from any folder; their parameters are checked in one place (workbench.report.pipeline); the
README's Python example runs and its module map names every module."""
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workbench.report import pipeline

ROOT = Path(__file__).resolve().parents[1]
PROMISED = {
    "01_padding_derivation": ["padding_costs.png", "padding_costs.svg", "padding_costs.csv", "page_byte_map.png",
                              "page_byte_map.svg", "page_byte_map.csv"],
    "02_correctness": ["correctness_error_distribution.png", "correctness_worst_by_shape.png", "correctness_gpu.png",
                       "correctness_golden.csv", "correctness_grid.csv", "mma_vs_perhead_fp32.csv",
                       "correctness_gpu_summary.csv"],
    "03_occupancy": ["occupancy_shared_memory.png", "occupancy_registers.png", "pruning_model_vs_compiled.png",
                     "warps_4_vs_8.png", "sm120_fit_by_tile.csv", "pruning_model_vs_compiled.csv",
                     "warps_4_vs_8_resources.csv", "projection_sm120.png", "projection_sm120.svg",
                     "projection_sm120.csv"],
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
    r = _run(["-f", "notebooks/tiny", "--runs-dir", str(runs)])
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
    from workbench.report.results import find_table
    bench = pd.read_csv(find_table(table, ROOT / "data"))  # in data/, or data/archive/ if it is history
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
    from workbench.report.results import load_bench  # the table's commit as data/errata.csv leaves it
    published = load_bench(data_dir=ROOT / "data")
    assert str(row.git_commit) == str(published[published.source == row.source].git_commit.iloc[0])


def test_ladder_numbers_come_from_data(tiny_run):
    """Notebook 05's per-rung times and goal inputs are the committed tables' numbers, not typed in."""
    import pandas as pd
    meas = pd.read_csv(tiny_run / "figures" / "ladder_measurements.csv")
    table = meas.source.iloc[0]
    assert table.endswith("_ladder.csv")
    for kernel, (b, h, k, e), key in (("wgmma_ws", (64, 16, 2048, 0), "h16"), ("mma", (64, 64, 2048, 0), "h64"),
                                      ("tile512", (1, 64, 512, 0), "b1"), ("wgmma_f16", (64, 16, 128, 512), "prod")):
        r = meas[(meas.kernel == kernel) & (meas.key == key)].iloc[0]
        us = _graph_row(table, kernel, b, h, k, e)
        assert r.us == pytest.approx(us)
        assert r.speed_vs_flashmla == pytest.approx(_graph_row(table, "flashmla", b, h, k, e) / us)
        assert r.time_over_floor == pytest.approx(us / _graph_row(table, "gather", b, h, k, e))
    record = pd.read_csv(ROOT / "data" / "rungs.csv").dropna(subset=["rung"]).sort_values("rung")
    assert list(dict.fromkeys(meas.kernel)) == list(record.name), "the ladder, removed rungs too, from data/rungs.csv"
    goals = pd.read_csv(tiny_run / "figures" / "ladder_goals.csv")
    assert len(goals) == 6
    from workbench import registry
    shapes = {"b64 h16 topk2048": (64, 16, 2048, 1), "b64 h64 topk2048": (64, 64, 2048, 1),
              "b64 h128 topk2048": (64, 128, 2048, 1), "b1 h64 topk512": (1, 64, 512, 1),
              "b64 h16 main 128@256 + extra 512@64": (64, 16, 640, 2)}
    for r in goals.itertuples():  # the auto rows, or the rows of the rung auto's rule picks at that shape
        b, h, tokens, scopes = shapes[r.shape]
        pick = registry.auto_kernel("sm_90", heads=h, tokens=b * tokens, queries=b, scopes=scopes)
        assert r.kernel in ("auto", pick), r.shape
    g = goals[goals["shape"].str.startswith("b64 h16 topk2048")].iloc[0]
    assert g.ours_us == pytest.approx(_graph_row(g.source, g.kernel, 64, 16, 2048))
    assert g.flashmla_us == pytest.approx(_graph_row(g.source, "flashmla", 64, 16, 2048))
    ncu = pd.read_csv(tiny_run / "figures" / "ladder_ncu.csv")
    assert len(ncu) == len(list((ROOT / "data" / "ncu").glob("*_ncu_*.txt")))
    assert ncu.registers.notna().all() and ncu.duration_us.notna().all()


def test_projection_numbers_come_from_data(tiny_run):
    """Notebook 03's sm_120 projection: each shape's proxy time is the current headline table's auto_portable graph
    row (and the kernel it records), its floor that row's bytes over 1,792 GB/s, its occupancy the sm_120 lab's row
    of the config named; labelled a projection in the executed notebook."""
    import pandas as pd
    proj = pd.read_csv(tiny_run / "figures" / "projection_sm120.csv")
    from workbench.report.results import current_tables, find_table
    head = pd.read_csv(find_table(current_tables().set_index("sweep").source["headline"], ROOT / "data"))
    lab = pd.read_csv(ROOT / "data" / "resources_sm_120.csv")
    assert len(proj) >= 4
    for r in proj.itertuples():
        sel = head[(head.provider == "auto_portable") & (head["mode"] == "graph") & (head.batch == r.batch)
                   & (head.heads == r.heads) & (head.topk == r.topk) & (head.extra_topk == r.extra_topk)]
        assert len(sel) == 1 and r.kernel == sel.kernel.iloc[0], r.shape
        assert r.proxy_us == pytest.approx(sel.median_us.iloc[0]) and r.bytes == sel["bytes"].iloc[0]
        assert r.target_floor_us == pytest.approx(r.bytes / 1792e9 * 1e6)
        row = lab[(lab.kernel == r.kernel) & (lab.config == r.target_configs)]
        assert len(row) == 1 and r.warps_per_sm_max == row.warps_per_sm.iloc[0], r.shape
    b64h16 = proj[(proj.batch == 64) & (proj.heads == 16) & (proj.topk == 2048)].iloc[0]
    assert b64h16.bytes == 64 * 2048 * 584 + 2 * 64 * 16 * 512 * 2
    nb = json.loads((tiny_run / "03_occupancy.ipynb").read_text())
    text = json.dumps([c["outputs"] for c in nb["cells"] if c["cell_type"] == "code"])
    assert "PROJECTION, not a measurement" in text and "sm_120 projection (a PROJECTION" in text


def test_every_run_gets_a_new_folder(tmp_path):
    a, b = pipeline.new_run_dir(tmp_path), pipeline.new_run_dir(tmp_path)
    assert a != b and a.exists() and b.exists()


def test_failing_notebook_exits_nonzero_and_keeps_the_executed_copy(tmp_path):
    r = _run(["--only", "03", "-p", "data_dir", str(tmp_path / "missing"), "--runs-dir", str(tmp_path)])
    assert r.returncode != 0
    assert "FAILED: 03_occupancy.ipynb" in r.stderr
    (run_dir,) = [p for p in tmp_path.iterdir() if p.name != "missing"]
    assert (run_dir / "03_occupancy.ipynb").exists()


def test_occupancy_notebook_reads_a_run_folder_of_one_sweep_with_the_lab_tables_of_data(tmp_path):
    """An sm_120 owner's (or an H100's) run folder holds bench tables only: notebook 03 takes the lab tables from
    data/ (compiled on a CPU, the same for every GPU), projects that folder's headline, and says it draws no 4 vs 8
    warps figure without a configs or warps sweep, instead of stopping at the first missing file."""
    import shutil

    from workbench.report.results import DATA, current_tables
    folder = tmp_path / "sweep"
    folder.mkdir()
    t = current_tables()
    src = DATA / t[(t.sweep == "headline") & (t.gpu == "NVIDIA H200")].source.iloc[0]
    shutil.copy(src, folder / src.name)
    r = _run(["--only", "03", "-p", "data_dir", str(folder), "--runs-dir", str(tmp_path / "runs")])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (run_dir,) = list((tmp_path / "runs").iterdir())
    figs = {p.name for p in (run_dir / "figures").iterdir()}
    assert {"projection_sm120.png", "occupancy_registers.png"} <= figs and "warps_4_vs_8.png" not in figs
    executed = (run_dir / "03_occupancy.ipynb").read_text()
    assert f"lab tables: {DATA / 'resources_sm_120.csv'}" in executed
    assert "no configs or warps sweep in" in executed
    import pandas as pd  # the projection's H200 proxy is the copied table's auto_portable time
    proj = pd.read_csv(run_dir / "figures" / "projection_sm120.csv")
    head = pd.read_csv(src)
    timed = head[(head.provider == "auto_portable") & (head["mode"] == "graph") & (head.batch == 64)
                 & (head.heads == 16) & (head.topk == 2048)]
    row = proj[(proj.batch == 64) & (proj.heads == 16) & (proj.topk == 2048)]
    assert len(timed) == 1 and len(row) == 1
    assert row.proxy_us.iloc[0] == pytest.approx(timed.median_us.iloc[0])


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
    assert "figures" not in default and default.startswith("runs/"), default
    assert pipeline.checked_parameters(nb.stem, {})["out_dir"] == str(ROOT / default), "from the repository root"


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

    from workbench.report.pipeline import RefusedOutput
    from workbench.report.figures import out_folder, save_figure, save_table
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


def _papermill(nb, executed, *args, cwd=ROOT):
    """Plain papermill, as a user types it (the kernel from the notebook's own metadata)."""
    return subprocess.run([sys.executable, "-m", "papermill", str(nb), str(executed), *args, "--no-progress-bar"],
                          cwd=cwd, capture_output=True, text=True, timeout=600)


def _stopped_in_the_set_up_cell(executed, ename):
    """The executed notebook shows one error, ``ename`` in one line, raised by the set-up cell (the one that checks
    the parameters and calls out_folder), and no cell after it ran."""
    cells = [c for c in json.loads(Path(executed).read_text())["cells"] if c["cell_type"] == "code"]
    errors = [(i, o) for i, c in enumerate(cells) for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert len(errors) == 1, errors
    i, error = errors[0]
    assert error["ename"] == ename and len(error["traceback"]) == 1, error["traceback"]
    source = "".join(cells[i]["source"])
    assert "checked_parameters(" in source and "out_folder(out_dir)" in source, "refused by the set-up cell"
    assert all(c.get("execution_count") is None for c in cells[i + 1:]), "nothing after it ran"


@pytest.mark.parametrize("nb", sorted((ROOT / "notebooks").glob("0*.ipynb")), ids=lambda p: p.stem)
def test_plain_papermill_refuses_out_dir_in_data_or_figures_before_computing(nb, tmp_path):
    """papermill without the pipeline: the notebook's own set-up cell refuses, in one line; a relative out_dir is
    taken from the repository root whichever folder papermill runs in (the repository or another one)."""
    where = "figures" if int(nb.stem[:2]) % 2 else "data/new"  # both folders across the five
    cwd = ROOT if int(nb.stem[:2]) in (1, 2, 5) else tmp_path
    before = _tree("data", "figures")
    executed = tmp_path / nb.name
    r = _papermill(nb, executed, "-p", "out_dir", where, cwd=cwd)
    folder = where.split("/")[0]
    assert r.returncode != 0
    assert f"RefusedOutput: out_dir {where}: is inside {folder}/" in r.stderr, r.stderr[-3000:]
    _stopped_in_the_set_up_cell(executed, "RefusedOutput")
    assert _tree("data", "figures") == before


@pytest.mark.slow
def test_plain_papermill_from_the_repository_root_takes_false_and_writes_only_inside_the_clone(tmp_path):
    """The reported failure: `papermill notebooks/03_occupancy.ipynb out.ipynb -p fresh false` from the repository
    root. It reads data/ and writes its figures into runs/scratch/ of the clone (nothing beside the clone), and
    "false" (papermill passes it as text) is False: the fresh cross-compile does not run."""
    scratch = ROOT / "runs" / "scratch"
    beside = ROOT.parent / "runs"  # where the old relative default, ../runs/scratch from the repository root, went

    def snapshot():
        return sorted((str(p), p.stat().st_mtime) for p in beside.rglob("*")) if beside.exists() else None
    beside_before = snapshot()
    before = _tree("data", "figures")
    executed = tmp_path / "out.ipynb"
    t0 = time.time()
    r = _papermill("notebooks/03_occupancy.ipynb", executed, "-f", "notebooks/tiny/03_occupancy.yaml",
                   "-p", "fresh", "false", cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    for f in PROMISED["03_occupancy"]:
        path = scratch / f
        assert path.is_file() and path.stat().st_mtime >= t0 - 1, f"{f} not written into {scratch}"
    assert snapshot() == beside_before, f"written beside the clone, into {beside}"
    assert _tree("data", "figures") == before
    cells = [c for c in json.loads(executed.read_text())["cells"] if c["cell_type"] == "code"]
    injected = next(c for c in cells if "injected-parameters" in c["metadata"].get("tags", []))
    assert "fresh = \"false\"" in "".join(injected["source"]), "papermill passed the text"
    shown = json.dumps([c["outputs"] for c in cells])
    assert "status_fresh" not in shown, "fresh='false' ran the fresh cross-compile"


@pytest.mark.slow
@pytest.mark.parametrize("nb, args, message", [
    ("02_correctness", ["-p", "heads_grid", "x"], "ParameterError: heads_grid: expected a list, each a positive "
                                                  "integer"),
    ("01_padding_derivation", ["-p", "device", "cuda"], "ParameterError: device cuda needs a CUDA GPU"),
], ids=["type", "cuda"])
def test_plain_papermill_stops_a_wrong_parameter_in_one_line_before_computing(nb, args, message, tmp_path):
    import torch
    if "cuda" in args and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    executed = tmp_path / f"{nb}.ipynb"
    r = _papermill(ROOT / "notebooks" / f"{nb}.ipynb", executed, *args, cwd=tmp_path)
    assert r.returncode != 0 and message in r.stderr, r.stderr[-3000:]
    _stopped_in_the_set_up_cell(executed, "ParameterError")


# ----------------------------------------------------------------------------- the parameter checks, in-process

@pytest.mark.parametrize("text, value", [("false", False), ("False", False), ("FALSE", False), ("true", True),
                                         ("True", True), (" true ", True), (False, False), (True, True),
                                         (0, False), (1, True), ("no", False), ("yes", True)])
def test_booleans_take_true_and_false_as_text(text, value):
    """papermill's -p passes `-p fresh false` as the string "false", which Python would take as true."""
    assert pipeline.checked_parameters("03_occupancy", {"fresh": text})["fresh"] is value
    assert pipeline.check_parameter("fresh", text, True) is value


@pytest.mark.parametrize("stem, name, value, expected", [
    ("02_correctness", "heads_grid", "x", "a list, each a positive integer"),
    ("02_correctness", "heads_grid", [1, 0], "a list, each a positive integer"),
    ("02_correctness", "topk_grid", [], "a list, each a positive integer"),
    ("02_correctness", "batch", "two", "a positive integer"),
    ("02_correctness", "seed", 1.5, "an integer"),
    ("03_occupancy", "fresh", "maybe", "true or false"),
    ("03_occupancy", "archs", "sm_91", "a list, each one of sm_120"),
    ("03_occupancy", "fresh_configs", [{"BLOCK_X": 16}], "a list, each a mapping with keys among BLOCK_H"),
    ("04_throughput", "sweep", "nope", "one of smoke"),
    ("01_padding_derivation", "device", "gpu", "one of cpu, cuda"),
    ("01_padding_derivation", "device", None, "one of cpu, cuda"),
])
def test_a_wrong_parameter_is_one_line_naming_it_and_its_default(stem, name, value, expected):
    with pytest.raises(pipeline.ParameterError) as e:
        pipeline.checked_parameters(stem, {name: value})
    msg = str(e.value)
    assert msg.startswith(f"{name}: expected {expected}") and f"got {value!r}" in msg and "default" in msg, msg
    assert "\n" not in msg and e.value._render_traceback_() == [f"ParameterError: {msg}"]


def test_a_single_value_where_a_list_is_expected_is_a_list_of_one_and_text_is_read_as_yaml():
    c = pipeline.checked_parameters("02_correctness", {"heads_grid": 5, "topk_grid": "[1, 37]", "batch": "3"})
    assert c["heads_grid"] == [5] and c["topk_grid"] == [1, 37] and c["batch"] == 3
    c = pipeline.checked_parameters("03_occupancy", {"archs": "sm_90", "fresh_configs": {"BLOCK_H": 32}})
    assert c["archs"] == ["sm_90"] and c["fresh_configs"] == [{"BLOCK_H": 32}]
    assert pipeline.checked_parameters("02_correctness", {}) == {  # the defaults pass as they are
        k: (str(ROOT / v) if k in pipeline.PATH_PARAMETERS else v)
        for k, v in pipeline.declared_parameters(ROOT / "notebooks" / "02_correctness.ipynb").items()}


def test_device_cuda_without_cuda_is_one_line(monkeypatch, tmp_path):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for stem in ("01_padding_derivation", "03_occupancy"):
        with pytest.raises(pipeline.ParameterError) as e:
            pipeline.checked_parameters(stem, {"device": "cuda"})
        assert str(e.value).startswith("device cuda needs a CUDA GPU") and "\n" not in str(e.value)
    with pytest.raises(pipeline.ParameterError, match=r"^fresh=True measures a new sweep and needs a CUDA GPU.*"
                                                      r"-p fresh false") as e:
        pipeline.checked_parameters("04_throughput", {"fresh": "true"})
    assert pipeline.checked_parameters("04_throughput", {"fresh": "false"})["fresh"] is False
    # the pipeline checks every notebook before the first one starts: one line, no run folder
    with pytest.raises(SystemExit) as e:
        pipeline.main(["-p", "device", "cuda", "--runs-dir", str(tmp_path / "runs"), "--no-progress"])
    assert "device cuda needs a CUDA GPU" in e.value.code and "\n" not in e.value.code
    assert not (tmp_path / "runs").exists()


def test_pipeline_checks_the_types_before_the_first_notebook(tmp_path):
    with pytest.raises(SystemExit) as e:
        pipeline.main(["-p", "heads_grid", "x", "--runs-dir", str(tmp_path / "runs"), "--no-progress"])
    assert e.value.code.startswith("02_correctness: heads_grid: expected a list") and "\n" not in e.value.code
    assert not (tmp_path / "runs").exists()


def test_folders_are_taken_from_the_repository_root_wherever_it_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    c = pipeline.checked_parameters("03_occupancy", {})
    assert c["data_dir"] == str(ROOT / "data") and c["out_dir"] == str(ROOT / "runs" / "scratch")
    assert pipeline.checked_parameters("03_occupancy", {"out_dir": str(tmp_path)})["out_dir"] == str(tmp_path)
    with pytest.raises(pipeline.ParameterError, match=r"^out_dir \.\./x: a relative folder is taken from the "
                                                      r"repository root .* leads out of it"):
        pipeline.checked_parameters("03_occupancy", {"out_dir": "../x"})
    with pytest.raises(pipeline.ParameterError, match=r"^data_dir nope: no such folder"):
        pipeline.checked_parameters("03_occupancy", {"data_dir": "nope"})


def test_tiny_parameters_are_one_papermill_file_per_notebook():
    """notebooks/tiny/<notebook>.yaml: what plain papermill's -f takes, every one checked; the pipeline's -f takes
    the folder (a file named after no notebook is an error)."""
    import yaml
    files = sorted((ROOT / "notebooks" / "tiny").glob("*.yaml"))
    assert [f.stem for f in files] == [p.stem for p in pipeline.all_notebooks()]
    for f in files:
        params = yaml.safe_load(f.read_text())
        assert isinstance(params, dict), f
        pipeline.checked_parameters(f.stem, params)
    assert pipeline.parameters_from(ROOT / "notebooks" / "tiny")["02_correctness"]["heads_grid"] == [1, 5]


def test_a_parameter_folder_with_a_file_named_after_no_notebook_is_refused(tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "07_nothing.yaml").write_text("seed: 1\n")
    with pytest.raises(SystemExit) as e:
        pipeline.main(["-f", str(tmp_path / "p"), "--runs-dir", str(tmp_path / "runs"), "--no-progress"])
    assert "no such notebook" in e.value.code and not (tmp_path / "runs").exists()


# ----------------------------------------------------------------------------- the README

def _readme_part(title: str, end: str = "\n## ") -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(title)
    stop = text.find(end, start + len(title))
    return text[start:stop if stop >= 0 else None]


@pytest.mark.slow
def test_readme_python_example_runs_as_written(tmp_path):
    """The README's "Use it from Python" block, in a fresh process in another folder, without TRITON_INTERPRET set
    outside it: it must say True (the decode within the tolerances of the fp32 reference)."""
    block = re.search(r"```python\n(.*?)```", _readme_part("## Use it from Python"), re.S).group(1)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["True"], r.stdout


def test_readme_module_map_names_every_module():
    """Every module of workbench/ and of its subpackages is in the README's map (by name, in backticks), and
    every subpackage by its folder (`format/`)."""
    text = _readme_part("Where things live", end="\n## ")
    pkg = ROOT / "workbench"
    modules = [p.relative_to(pkg).with_suffix("").as_posix() for p in sorted(pkg.rglob("*.py"))
               if p.stem != "__init__" and "__pycache__" not in p.parts]
    missing = [m for m in modules if f"`{m.rsplit('/', 1)[-1]}`" not in text and f"`{m}`" not in text]
    missing += [f"{d.name}/" for d in sorted(pkg.iterdir()) if (d / "__init__.py").exists()
                and f"`{d.name}/`" not in text]
    assert not missing, f"README's module map lacks {missing}"


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


def test_jobs_must_be_positive_and_default_to_at_most_two():
    from workbench.report import pipeline
    r = _run(["--jobs", "0"])
    assert r.returncode == 2 and "--jobs: expected a positive integer, got 0" in r.stderr
    assert 1 <= pipeline.default_jobs() <= 2
