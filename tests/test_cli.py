"""The command line: where results go, publishing, refusals before anything runs, the CPU-only messages, set-up."""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from workbench import __main__ as cli
from workbench.report.results import find_table
from workbench.report import pipeline

ROOT = Path(__file__).resolve().parents[1]
H200 = {"gpu": "NVIDIA H200", "date": "2026-11-29T12:34:56Z", "git_commit": "abc1234"}
NO_CUDA = not torch.cuda.is_available()

UNKNOWN_NB = "99"  # no notebook has this number (the example, 05, exists now: the ladder)


def _tree(*dirs):
    """{path: sha256, or "dir"} of everything under dirs, to show that a command wrote (or made) nothing there."""
    return {str(p.relative_to(ROOT)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for d in dirs for p in sorted((ROOT / d).rglob("*"))}


def _git_status(*paths):
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", *paths], cwd=ROOT,
                          capture_output=True, text=True).stdout


@pytest.fixture
def runs(tmp_path, monkeypatch):
    """runs/ and data/ of the CLI moved to a temporary folder."""
    monkeypatch.setattr(cli, "RUNS", tmp_path / "runs")
    monkeypatch.setattr(cli, "DATA", tmp_path / "data")
    (tmp_path / "data").mkdir()
    return tmp_path


# ----------------------------------------------------------------------------- CPU-only machines

@pytest.mark.parametrize("argv", [["check"], ["check", "--sanitize", "mma"], ["bench"], ["check", "--impls", "auto", "mma"],
                                  ["check", "--sanitize", "mma", "--case", "h1-k1-bs2-one-token", "--combine",
                                   "serial"]], ids=" ".join)
def test_gpu_commands_end_in_one_line_without_cuda(argv, runs, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    rc = cli.main(argv)
    err = capsys.readouterr().err
    assert rc != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "needs a CUDA GPU" in lines[0] and "run_notebooks.sh" in lines[0] and "TRITON_INTERPRET=1" in lines[0]
    assert not (runs / "runs").exists(), "nothing is written before the command can run"


@pytest.mark.skipif(not NO_CUDA, reason="the real no-CUDA process needs a machine without CUDA")
def test_bench_process_without_cuda_exits_nonzero_with_one_line():
    r = subprocess.run([sys.executable, "-m", "workbench", "bench"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode != 0
    assert r.stderr.strip().count("\n") == 0 and "needs a CUDA GPU" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.skipif(not NO_CUDA, reason="on a GPU these commands would measure for minutes")
def test_cli_defaults_leave_data_figures_and_git_status_alone(capsys):
    before, status = _tree("data", "figures"), _git_status("data", "figures", "notebooks", "scripts")
    assert cli.main(["check"]) != 0
    assert cli.main(["check", "--sanitize", "simt"]) != 0
    assert cli.main(["bench"]) != 0
    for argv in (["--only", UNKNOWN_NB], ["-p", "devcie", "cpu"], ["-f", "notebooks/tiny", "--publish"]):
        with pytest.raises(SystemExit) as e:
            cli.main(["notebooks", *argv])
        assert e.value.code not in (0, None)
    assert _tree("data", "figures") == before
    assert _git_status("data", "figures", "notebooks", "scripts") == status


# ----------------------------------------------------------------------------- where results go, publishing

@pytest.fixture
def fake_bench(monkeypatch):
    """bench's measuring parts replaced by a two-row table, so the CLI's file handling runs on a CPU."""
    import workbench.bench as bench
    import workbench.report.provenance as provenance
    monkeypatch.setattr(cli, "_needs_cuda", lambda what: 0)
    monkeypatch.setattr(bench, "run_sweep", lambda name, progress, on_rows: on_rows([{"x": 1}, {"x": 2}]) or
                        [{"x": 1}, {"x": 2}])
    monkeypatch.setattr(bench, "rows_frame", pd.DataFrame)
    monkeypatch.setattr(bench, "fit_batch_model", lambda df: pd.DataFrame())
    monkeypatch.setattr(bench, "summary_markdown", lambda df: "summary")
    monkeypatch.setattr(provenance, "provenance", lambda: dict(H200))


def test_bench_writes_a_new_run_folder_or_exactly_out(runs, fake_bench, tmp_path):
    assert cli.main(["bench"]) == 0
    assert cli.main(["bench"]) == 0
    folders = sorted((runs / "runs").iterdir())
    assert len(folders) == 2 and all(f.name.endswith("-bench") or "-bench-" in f.name for f in folders)
    assert all(sorted(p.name for p in f.iterdir()) == ["bench_h200.csv", "bench_h200.meta.json"] for f in folders)
    out = tmp_path / "explicit"
    assert cli.main(["bench", "--out", str(out), "--name", "b.csv"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["b.csv", "b.meta.json"]
    assert len(list((runs / "runs").iterdir())) == 2, "--out is the only destination"
    assert list((runs / "data").iterdir()) == [], "nothing reaches data/ without --publish"


def test_bench_publish_adds_a_dated_table_and_never_replaces_one(runs, fake_bench, capsys):
    assert cli.main(["bench", "--publish"]) == 0
    names = sorted(p.name for p in (runs / "data").iterdir())
    assert names == ["bench_h200_20261129-1234.csv", "bench_h200_20261129-1234.meta.json"]
    first = (runs / "data" / names[0]).read_bytes()
    (run,) = (runs / "runs").iterdir()
    capsys.readouterr()
    assert cli.main(["publish", str(run / "bench_h200.csv")]) == 1, "the same table twice is refused"
    assert "never replaced" in capsys.readouterr().err
    assert (runs / "data" / names[0]).read_bytes() == first


def _run_table(folder: Path, name="bench_h200.csv", meta=H200, fit=True) -> Path:
    folder.mkdir(parents=True)
    csv = folder / name
    pd.read_csv(find_table("bench_h200.csv")).to_csv(csv, index=False)  # a real table (archived, gzipped), so
                                                                        # load_bench reads it
    if meta is not None:
        csv.with_name(csv.stem + ".meta.json").write_text(json.dumps(meta))
    if fit:
        csv.with_name(csv.stem + ".fit.csv").write_text("a,b\n1,2\n")
    return csv


def test_publish_an_earlier_run_into_data_where_load_bench_finds_it(runs):
    from workbench.report.results import load_bench
    csv = _run_table(runs / "runs" / "20261129-123456-bench")
    assert cli.main(["publish", str(csv)]) == 0
    stem = "bench_h200_20261129-1234"
    assert sorted(p.name for p in (runs / "data").iterdir()) == [f"{stem}.csv", f"{stem}.fit.csv",
                                                                  f"{stem}.meta.json"]
    df = load_bench(data_dir=runs / "data")
    assert set(df["source"]) == {f"{stem}.csv"} and len(df) == len(pd.read_csv(csv))


def test_publish_names_a_second_table_of_the_same_minute_to_the_second(runs):
    """A GPU call's check table and its pytest table can start in the same minute: both are kept, neither is
    replaced, and the same table twice is still refused."""
    a = _run_table(runs / "runs" / "a", name="correctness_h200.csv", meta=dict(H200, date="2026-11-29T12:34:10Z"))
    b = _run_table(runs / "runs" / "b", name="correctness_h200_pytest.csv",
                   meta=dict(H200, date="2026-11-29T12:34:50Z"), fit=False)
    b.write_bytes(a.read_bytes() + b"\n")  # another table
    assert cli.main(["publish", str(a)]) == 0 and cli.main(["publish", str(b)]) == 0
    names = sorted(p.name for p in (runs / "data").iterdir() if p.suffix == ".csv" and "fit" not in p.name)
    assert names == ["correctness_h200_20261129-1234.csv", "correctness_h200_20261129-123450.csv"]
    assert cli.main(["publish", str(b)]) == 1 and cli.main(["publish", str(a)]) == 1  # never a second copy


@pytest.mark.parametrize("case,match", [
    ("cpu", "names no GPU"), ("no-date", "no date"), ("other-kind", "takes bench and correctness"),
    ("in-data", "in data/ already"), ("missing", "no such table")])
def test_publish_refusals(runs, case, match):
    meta = dict(H200, gpu="cpu") if case == "cpu" else {"gpu": "NVIDIA H200"} if case == "no-date" else H200
    name = "resources_sm_90.csv" if case == "other-kind" else "bench_h200.csv"
    csv = _run_table(runs / "runs" / "r", name=name, meta=meta)
    if case == "in-data":
        csv = (runs / "data" / "bench_h200.csv")
        csv.write_text("x\n1\n")
    if case == "missing":
        csv = runs / "runs" / "r" / "bench_nope.csv"
    with pytest.raises(ValueError, match=match):
        cli.publish_table(csv, data_dir=runs / "data")
    assert [p.name for p in (runs / "data").iterdir()] == (["bench_h200.csv"] if case == "in-data" else [])


def test_gpu_slug():
    assert cli.gpu_slug("NVIDIA H200") == "h200"
    assert cli.gpu_slug("NVIDIA RTX PRO 6000 Blackwell Server Edition") == "rtx_pro_6000_blackwell_server_edition"


# ----------------------------------------------------------------------------- refused --out, out_dir, --runs-dir

# --out values (the current folder is the repository) that land in data/ or figures/: only publishing adds there
INSIDE_PUBLISHED = {"data": "data", "figures": "figures", "data-new-deeper": "data/new/deeper",
                    "figures-slash": "figures/", "dotdot-into-data": "notebooks/../data",
                    "absolute-figures-sub": str(ROOT / "figures" / "sub"), "symlink-to-data": None}


def _inside(where, tmp_path):
    if INSIDE_PUBLISHED[where] is not None:
        return INSIDE_PUBLISHED[where]
    link = tmp_path / "link"
    link.symlink_to(ROOT / "data", target_is_directory=True)
    return str(link / "new")


@pytest.fixture
def no_cuda_check(monkeypatch):
    """A refusal must come before the CUDA check, so that it holds (and is tested) on a CPU machine too."""
    monkeypatch.setattr(cli, "_needs_cuda", lambda what: pytest.fail(f"{what}: ran past a refused --out"))


@pytest.mark.parametrize("where", list(INSIDE_PUBLISHED))
@pytest.mark.parametrize("argv", [["check"], ["bench"], ["check", "--sanitize", "mma"]], ids=" ".join)
def test_out_inside_data_or_figures_is_refused_even_with_force(argv, where, tmp_path, monkeypatch, no_cuda_check,
                                                               capsys):
    from workbench.report.pipeline import PUBLISH_STEP
    monkeypatch.chdir(ROOT)
    out, before = _inside(where, tmp_path), _tree("data", "figures")
    assert cli.main([*argv, "--out", out]) == 2
    assert cli.main([*argv, "--out", out, "--force"]) == 2, "--force never opens data/ or figures/"
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 2 and "Traceback" not in err, err
    folder = "figures" if "figures" in where else "data"
    for line in lines:
        assert line.startswith(f"{argv[0]}: --out {out}: is inside {folder}/"), line
        assert f"only publishing adds to {folder}/ ({PUBLISH_STEP[folder]})" in line
    assert _tree("data", "figures") == before, "nothing written or made in data/ or figures/"


@pytest.mark.parametrize("argv", [["bench", "--out", "data"], ["check", "--out", "figures/new"],
                                  ["bench", "--out", "README.md"]], ids=" ".join)
def test_out_refusal_process_exits_2_with_one_line_before_the_cuda_check(argv):
    """As a process (a GPU machine gives the same answer: the refusal precedes the CUDA check)."""
    before = _tree("data", "figures")
    r = subprocess.run([sys.executable, "-m", "workbench", *argv], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr and "needs a CUDA GPU" not in r.stderr, r.stderr
    assert r.stderr.startswith(f"{argv[0]}: --out {argv[2]}: ")
    assert ("is a file" if argv[2] == "README.md" else "only publishing adds to") in r.stderr
    assert _tree("data", "figures") == before


@pytest.mark.parametrize("cmd", ["check", "bench"])
@pytest.mark.parametrize("under", [False, True], ids=["the-file", "a-path-under-it"])
@pytest.mark.parametrize("force", [[], ["--force"]], ids=["", "--force"])
def test_out_naming_a_file_is_one_line_exit_2(cmd, under, force, tmp_path, no_cuda_check, capsys):
    f = tmp_path / "table.csv"
    f.write_text("x\n1\n")
    out = f / "sub" if under else f
    assert cli.main([cmd, "--out", str(out), *force]) == 2
    err = capsys.readouterr().err
    said = f"{out}: {f} is a file, not a folder" if under else f"{f}: is a file, not a folder"
    assert err == f"{cmd}: --out {said}\n", err
    assert f.read_text() == "x\n1\n" and sorted(tmp_path.iterdir()) == [f]


@pytest.mark.parametrize("cmd", ["check", "bench"])
def test_out_folder_with_files_is_refused_without_force(cmd, tmp_path, no_cuda_check, capsys):
    out = tmp_path / "used"
    out.mkdir()
    (out / "bench_h200.csv").write_text("earlier\n")
    assert cli.main([cmd, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "files in it already" in err and "--force" in err
    assert [p.name for p in out.iterdir()] == ["bench_h200.csv"] and (out / "bench_h200.csv").read_text() == "earlier\n"


def test_bench_force_writes_into_a_folder_with_files_keeping_the_others(runs, fake_bench, tmp_path):
    out = tmp_path / "used"
    out.mkdir()
    (out / "b.csv").write_text("earlier\n")
    (out / "notes.txt").write_text("keep\n")
    assert cli.main(["bench", "--out", str(out), "--name", "b.csv"]) == 2
    assert (out / "b.csv").read_text() == "earlier\n"
    assert cli.main(["bench", "--out", str(out), "--name", "b.csv", "--force"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["b.csv", "b.meta.json", "notes.txt"]
    assert (out / "b.csv").read_text() == "x\n1\n2\n" and (out / "notes.txt").read_text() == "keep\n"


def test_bench_out_may_be_an_empty_folder(runs, fake_bench, tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    assert cli.main(["bench", "--out", str(out), "--name", "b.csv"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["b.csv", "b.meta.json"]


@pytest.mark.parametrize("argv", [["check", "--name", "../correctness_h200.csv"], ["bench", "--name", "sub/b.csv"],
                                  ["bench", "--name", ".."]], ids=" ".join)
def test_name_that_is_a_path_is_refused(argv, runs, tmp_path, no_cuda_check, capsys):
    assert cli.main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert "a file name, not a path" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not (runs / "runs").exists()


PIPELINE_INSIDE = {"figures": ["-p", "out_dir", "figures"], "data-new": ["-p", "out_dir", "data/new"],
                   "dotdot-figures-force": ["-p", "out_dir", "notebooks/../figures", "--force"],
                   "section-absolute-data": ["-p", "02_correctness", f"{{out_dir: {ROOT / 'data'}}}"]}


@pytest.mark.parametrize("argv", list(PIPELINE_INSIDE.values()), ids=list(PIPELINE_INSIDE))
def test_notebooks_out_dir_inside_data_or_figures_is_refused(argv, tmp_path, monkeypatch):
    """-p out_dir is relative to the current folder (here the repository), not to notebooks/ where they run."""
    monkeypatch.chdir(ROOT)
    before = _tree("data", "figures")
    msg = _pipeline_exit(argv, tmp_path)
    folder = "figures" if "figures" in " ".join(argv) else "data"
    assert msg.startswith("out_dir ") and f"is inside {folder}/" in msg and f"only publishing adds to {folder}/" in msg
    assert _tree("data", "figures") == before


def test_notebooks_out_dir_inside_figures_process_exits_with_one_line():
    before = _tree("data", "figures")
    r = subprocess.run([sys.executable, "-m", "workbench", "notebooks", "-p", "out_dir", "figures", "--no-progress"],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode != 0 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("out_dir figures: is inside figures/") and "notebooks --publish" in r.stderr
    assert _tree("data", "figures") == before


@pytest.mark.parametrize("folder", ["data", "figures"])
def test_notebooks_runs_dir_inside_data_or_figures_is_refused(folder, monkeypatch):
    monkeypatch.chdir(ROOT)
    before = _tree("data", "figures")
    with pytest.raises(SystemExit) as e:
        pipeline.main(["--runs-dir", folder, "--no-progress"])
    assert str(e.value.code).startswith(f"--runs-dir {folder}: is inside {folder}/") and "\n" not in e.value.code
    assert _tree("data", "figures") == before


class _Ran(Exception):
    pass


@pytest.fixture
def papermill_calls(monkeypatch):
    """papermill replaced by a recorder that stops the run at the first notebook."""
    import papermill as pm
    calls = []

    def execute_notebook(src, dst, parameters, **kw):
        calls.append(parameters)
        raise _Ran
    monkeypatch.setattr(pm, "execute_notebook", execute_notebook)
    return calls


def test_notebooks_out_dir_with_files_is_refused_unless_force(tmp_path, monkeypatch, papermill_calls):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "figs").mkdir()
    (tmp_path / "figs" / "old.png").write_bytes(b"png")
    msg = _pipeline_exit(["-p", "out_dir", "figs"], tmp_path)
    assert msg.startswith("out_dir figs: is a folder with files in it already") and "--force" in msg
    assert papermill_calls == []
    with pytest.raises(_Ran):
        pipeline.main(["-p", "out_dir", "figs", "--force", "--only", "01", "--runs-dir", str(tmp_path / "runs"),
                       "--no-progress"])
    assert papermill_calls[0]["out_dir"] == str(tmp_path / "figs"), "relative to where the command was typed"
    assert [p.name for p in (tmp_path / "figs").iterdir()] == ["old.png"]


def test_notebooks_new_out_dir_runs_and_is_passed_absolute(tmp_path, monkeypatch, papermill_calls):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(_Ran):
        pipeline.main(["-p", "out_dir", "new/figs", "-p", "data_dir", "d", "--only", "01", "--runs-dir",
                       str(tmp_path / "runs"), "--no-progress"])
    assert papermill_calls[0]["out_dir"] == str(tmp_path / "new" / "figs")
    assert papermill_calls[0]["data_dir"] == str(tmp_path / "d")


def test_notebooks_publish_with_out_dir_is_refused(tmp_path):
    """--publish copies the run folder's own figures/; an out_dir elsewhere would leave it nothing (or another
    run's files) to copy, and keeps --force's two meanings (reduced set, folder with files) apart."""
    before = _tree("figures")
    msg = _pipeline_exit(["-p", "out_dir", str(tmp_path / "figs"), "--publish"], tmp_path)
    assert msg.startswith("--publish refused") and "out_dir" in msg
    assert _tree("figures") == before and not (tmp_path / "figs").exists()


# ----------------------------------------------------------------------------- choices and help

def _sub(name):
    sub = next(a for a in cli.parser()._actions if a.dest == "cmd")
    return sub.choices[name]


def _choices(sub, flag):
    return next(a for a in _sub(sub)._actions if flag in a.option_strings).choices


def test_choices_come_from_the_modules_that_own_them(capsys):
    from workbench.bench import SWEEPS
    from workbench.lab.resources import KERNELS
    from workbench.lab.targets import TARGETS
    assert tuple(_choices("resources", "--kernel")) == (*KERNELS, "all")
    assert tuple(_choices("resources", "--arch")) == (*TARGETS, "all")
    assert tuple(_choices("bench", "--sweep")) == tuple(SWEEPS)
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["bench", "--sweep", "smok"])
    assert "invalid choice" in capsys.readouterr().err
    help_text = _sub("bench").format_help()
    assert all(s in help_text for s in SWEEPS), "--help lists the sweeps"
    assert "about 5 minutes" in _sub("resources").format_help()


def test_sanitize_case_choices_are_the_catalogue(capsys):
    from workbench.format import cases
    assert tuple(_choices("check", "--case")) == tuple(e.id for e in cases.catalogue()) + tuple(cases.scaled_ids())
    assert cli.parser().parse_args(["check", "--sanitize", "mma"]).case == cases.SANITIZER
    big = "h5-sq2-k100-bs61-sinkmixed-tklen-allinvalid@b4-h128-sq3-k2048"  # 128 heads: rung 15's two-group build
    assert cli.parser().parse_args(["check", "--sanitize", "wgmma_ws_h64", "--case", big]).case == big
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["check", "--sanitize", "mma", "--case", "h1-k1"])
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize("combine, pdl", [("rule", None), ("pdl", True), ("serial", False)])
def test_check_sanitize_passes_case_and_combine_through(combine, pdl, monkeypatch):
    from workbench import gpu_check
    seen = []
    monkeypatch.setattr(cli, "_needs_cuda", lambda what: 0)
    monkeypatch.setattr(gpu_check, "sanitizer_case", lambda impl, **kw: seen.append((impl, kw)))
    assert cli.main(["check", "--sanitize", "wgmma_ws", "--case", "h1-k1-bs2-one-token", "--combine", combine]) == 0
    assert seen == [("wgmma_ws", dict(case_id="h1-k1-bs2-one-token", pdl=pdl))]


def test_case_and_combine_without_sanitize_are_refused(monkeypatch, capsys):
    monkeypatch.setattr(cli, "_needs_cuda", lambda what: pytest.fail("refused before anything runs"))
    assert cli.main(["check", "--combine", "serial"]) == 2
    assert "--sanitize" in capsys.readouterr().err


@pytest.mark.interpreter
@pytest.mark.parametrize("pdl", [None, False, True], ids=["rule", "serial", "pdl"])
def test_sanitizer_case_runs_the_named_entry_under_the_combine_launch_asked_for(pdl, monkeypatch, capsys):
    """The case compute-sanitizer wraps decodes the chosen catalogue entry, inside combine_launch(pdl) when pdl is
    given, and compares it with the reference (interpreter, CPU tensors: the path the GPU takes, minus the
    sanitizer)."""
    from workbench import decode, gpu_check
    from workbench.format import cases
    seen = []
    real = gpu_check.sparse_mla_decode

    def spy(**kw):
        seen.append((tuple(kw["q"].shape), kw["indices"].shape[-1], decode._PDL_OVERRIDE.get()))
        return real(**kw)
    monkeypatch.setattr(gpu_check, "sparse_mla_decode", spy)
    gpu_check.sanitizer_case("mma", device="cpu", case_id="h1-k1-bs2-one-token", pdl=pdl)
    spec = cases.get("h1-k1-bs2-one-token").spec
    assert seen == [((spec["batch"], 1, spec["heads"], 512), spec["topk"], pdl)]
    assert decode._PDL_OVERRIDE.get() is None, "the override ends with the case"
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert f"(h1-k1-bs2-one-token, combine pdl={'rule' if pdl is None else pdl})" in line
    assert "passed=True" in line


def test_resources_printout_has_prefetch(monkeypatch, capsys):
    import workbench.lab.resources as resources
    lab = pd.DataFrame([dict(kernel="mma", arch="sm_120", BLOCK_H=16, BLOCK_T=32, num_warps=4, num_stages=1,
                             config=str({"BLOCK_H": 16, "BLOCK_T": 32, "PREFETCH": p, "num_warps": 4,
                                         "num_stages": 1}), status="fits", registers=200) for p in (0, 1)]
                       + [dict(kernel="simt", arch="sm_120", BLOCK_H=None, BLOCK_T=16, num_warps=4, num_stages=1,
                               config=str({"BLOCK_T": 16, "num_warps": 4, "num_stages": 1}), status="fits",
                               registers=90)])

    def fake_sweep(**kw):
        print("the lab's own printout")
        return lab
    monkeypatch.setattr(resources, "sweep_to_csv", fake_sweep)
    assert cli.main(["resources", "--kernel", "all"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "PREFETCH" in out[0].split() and len(out) == 4 and "own printout" not in "".join(out)
    col = out[0].split().index("PREFETCH")
    assert [line.split()[col] for line in out[1:]] == ["0", "1", "-"]


# ----------------------------------------------------------------------------- the notebook pipeline

def _pipeline_exit(argv, tmp_path):
    with pytest.raises(SystemExit) as e:
        pipeline.main([*argv, "--runs-dir", str(tmp_path / "runs"), "--no-progress"])
    assert not (tmp_path / "runs").exists(), "a refusal leaves no run folder"
    assert isinstance(e.value.code, str) and "\n" not in e.value.code, "one line"
    return e.value.code


def test_only_an_unknown_notebook_names_the_known_ones(tmp_path):
    assert not any(p.name.startswith(UNKNOWN_NB) for p in pipeline.all_notebooks())
    msg = _pipeline_exit(["--only", UNKNOWN_NB], tmp_path)
    assert UNKNOWN_NB in msg and all(p.stem in msg for p in pipeline.all_notebooks())


def test_only_an_unknown_notebook_process_exits_nonzero_and_leaves_no_run_folder(tmp_path):
    r = subprocess.run([sys.executable, "-m", "workbench", "notebooks", "--only", UNKNOWN_NB, "--runs-dir",
                        str(tmp_path / "runs")], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode != 0 and "01_padding_derivation" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "runs").exists()


def test_unknown_parameter_names_the_known_ones(tmp_path):
    msg = _pipeline_exit(["-p", "devcie", "cpu"], tmp_path)
    known = set().union(*(pipeline.declared_parameters(p) for p in pipeline.all_notebooks()))
    assert "'devcie'" in msg and "did you mean 'device'" in msg and all(k in msg for k in known)


def test_unknown_parameter_in_a_notebook_section_names_that_notebooks_parameters(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text(json.dumps({"01_padding_derivation": {"heads_grid": [1]}}))
    msg = _pipeline_exit(["-f", str(p)], tmp_path)
    assert "heads_grid" in msg and "01_padding_derivation" in msg and "seed" in msg and "topk_grid" not in msg
    p.write_text(json.dumps({"05_nothing": {"seed": 1}}))
    assert "no such notebook" in _pipeline_exit(["-f", str(p)], tmp_path)


def test_parameters_cell_is_read_like_papermill_reads_it():
    import papermill as pm
    for path in pipeline.all_notebooks():
        assert list(pipeline.declared_parameters(path)) == list(pm.inspect_notebook(str(path)))


@pytest.mark.parametrize("argv", [["-f", "notebooks/tiny"], ["-p", "heads_grid", "[1, 5]"],
                                  ["-p", "03_occupancy", "{archs: [sm_90]}"]], ids=["tiny", "-p", "section"])
def test_publish_refuses_a_reduced_parameter_set(argv, tmp_path):
    before = _tree("figures")
    msg = _pipeline_exit([*argv, "--publish"], tmp_path)
    assert msg.startswith("--publish refused") and "--force" in msg
    assert _tree("figures") == before


def test_the_notebooks_default_gpu_is_the_reference_gpu():
    """The notebooks that take ``gpu`` draw the H200's tables by default, the GPU the figures and goals are of."""
    from workbench.report.results import REFERENCE_GPU
    declared = {p.stem: pipeline.declared_parameters(p) for p in pipeline.all_notebooks()}
    takes = {stem for stem, names in declared.items() if "gpu" in names}
    assert takes >= {"04_throughput", "05_optimization_ladder"}
    assert {declared[stem]["gpu"] for stem in takes} == {REFERENCE_GPU}


H100 = "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("argv", [["-p", "gpu", H100], ["-p", "05_optimization_ladder", f"{{gpu: {H100}}}"],
                                  ["-p", "gpu", H100, "--force"]], ids=["-p", "section", "force"])
def test_publish_refuses_another_gpus_figures(argv, tmp_path, papermill_calls):
    """Another GPU's figures never go into figures/, whose names do not say the GPU: not even with --force. The
    refusal comes before any notebook runs (papermill is a recorder that would stop the run)."""
    before = _tree("figures")
    msg = _pipeline_exit([*argv, "--only", "04", "05", "--publish"], tmp_path)
    assert msg.startswith("--publish refused") and H100 in msg and "05_optimization_ladder" in msg
    assert _tree("figures") == before and papermill_calls == []
    declared = {p.stem: pipeline.declared_parameters(p) for p in pipeline.all_notebooks()}
    assert pipeline.other_gpus({"04_throughput": {"gpu": "NVIDIA H200"}, "02_correctness": {}}, declared) == []


def test_publish_refuses_figures_a_notebook_drew_from_another_gpu(tmp_path):
    """What the gpu parameter cannot see (a data_dir or a fresh sweep of another GPU) the notebooks' records of the
    GPU they drew catch, before anything is copied."""
    from workbench.report.figures import record_drawn_gpu
    from workbench.report.results import REFERENCE_GPU
    figs = tmp_path / "figures"
    record_drawn_gpu(pd.DataFrame({"gpu": [REFERENCE_GPU, REFERENCE_GPU]}), "04_throughput", figs)
    record_drawn_gpu(pd.DataFrame({"gpu": [float("nan")]}), "02_correctness", figs)  # no GPU named: an H200 table
    pipeline.refuse_other_gpus(figs, tmp_path)  # the reference GPU's: passes
    record_drawn_gpu(pd.DataFrame({"gpu": [REFERENCE_GPU, H100]}), "05_optimization_ladder", figs)
    with pytest.raises(SystemExit) as e:
        pipeline.refuse_other_gpus(figs, tmp_path)
    assert "05_optimization_ladder drew " + H100 in str(e.value.code) and "04_throughput" not in str(e.value.code)


def test_a_gpu_with_no_tables_is_refused_in_one_line(tmp_path):
    """A gpu parameter naming a GPU data_dir has no bench table of stops before the notebook runs, listing the GPUs
    that have tables; the default reads a folder of one other GPU as it is."""
    from workbench.report.pipeline import ParameterError, checked_parameters
    pd.DataFrame({"sweep": ["headline"], "gpu": [H100]}).to_csv(tmp_path / "bench_h100_20261205-1611_headline.csv")
    for stem in ("04_throughput", "05_optimization_ladder"):
        assert checked_parameters(stem, {"data_dir": str(tmp_path)})["gpu"] == "NVIDIA H200"
        assert checked_parameters(stem, {"data_dir": str(tmp_path), "gpu": H100})["gpu"] == H100
        with pytest.raises(ParameterError) as e:
            checked_parameters(stem, {"data_dir": str(tmp_path), "gpu": "NVIDIA H300"})
        assert "NVIDIA H300" in str(e.value) and H100 in str(e.value) and "\n" not in str(e.value)


def test_reductions_compare_with_each_notebooks_defaults():
    declared = {p.stem: pipeline.declared_parameters(p) for p in pipeline.all_notebooks()}
    nb2 = declared["02_correctness"]
    assert pipeline.reductions({"02_correctness": {}}, declared) == []
    assert pipeline.reductions({"02_correctness": {"heads_grid": nb2["heads_grid"] + [32], "seed": 0,
                                                   "device": "cuda", "fresh": False}}, declared) == []
    assert len(pipeline.reductions({"02_correctness": {"batch": 1, "topk_grid": [1]}}, declared)) == 2


def test_force_publishes_a_reduced_set(tmp_path, monkeypatch):
    import papermill as pm

    class Ran(Exception):
        pass

    def execute_notebook(*a, **kw):
        raise Ran
    monkeypatch.setattr(pm, "execute_notebook", execute_notebook)
    with pytest.raises(Ran):
        pipeline.main(["-f", "notebooks/tiny", "--publish", "--force", "--runs-dir", str(tmp_path),
                       "--no-progress"])


def test_pipeline_runs_quietly_and_reports_progress_once(tmp_path, monkeypatch, capfd):
    """A one-cell notebook through the real kernel: no TCP warning, and each progress state printed once."""
    nb = {"cells": [{"id": "params", "cell_type": "code", "metadata": {"tags": ["parameters"]}, "execution_count": None,
                     "outputs": [], "source": ["out_dir = 'x'\n", "data_dir = 'y'\n", "n = 2\n"]},
                    {"id": "work", "cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                     "source": ["import os\n", "os.makedirs(out_dir, exist_ok=True)\n", "print(n * 21)"]}],
          "metadata": {"kernelspec": {"name": pipeline.KERNEL, "display_name": "MLA workbench",
                                      "language": "python"}}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "nb").mkdir()
    (tmp_path / "nb" / "01_trivial.ipynb").write_text(json.dumps(nb))
    monkeypatch.setattr(pipeline, "NOTEBOOKS", tmp_path / "nb")
    run_dir = pipeline.run({"n": 3}, runs_dir=tmp_path / "runs")
    out, err = capfd.readouterr()
    assert "without encryption" not in out + err
    assert err.count("notebooks: 1/1 01_trivial") == 1, err
    executed = json.loads((run_dir / "01_trivial.ipynb").read_text())
    assert "63" in json.dumps(executed["cells"][-1]["outputs"]), "-p n 3 reached the notebook"


# ----------------------------------------------------------------------------- set-up

IN_VENV = Path(sys.prefix).resolve() == (ROOT / ".venv").resolve()


@pytest.mark.skipif(not IN_VENV, reason="checks the project's .venv; this runs under another Python "
                                        f"({sys.prefix})")
def test_venv_has_jupyter_lab_and_the_workbench_kernel():
    from importlib.metadata import version

    from jupyter_client.kernelspec import KernelSpecManager
    lab = Path(sys.prefix) / "bin" / "jupyter-lab"
    assert lab.is_file() and os.access(lab, os.X_OK), "README's `.venv/bin/jupyter lab` needs jupyterlab"
    pinned = [line.split("==")[1].strip() for line in (ROOT / "requirements.lock").read_text().splitlines()
              if line.startswith("jupyterlab==")]
    assert pinned == [version("jupyterlab")]
    spec = KernelSpecManager().get_kernel_spec(pipeline.KERNEL)
    assert spec.display_name == "MLA workbench"
    assert Path(spec.argv[0]).absolute().is_relative_to(ROOT / ".venv"), f"kernel runs {spec.argv[0]}"
