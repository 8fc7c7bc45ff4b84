"""scripts/gpu_session.sh on a GPU that is not an H200, without a GPU: FlashMLA's one line, the kernels left out
of check and compute-sanitizer, the sweeps said to stop, and the tables named after the GPU.

The script runs for real from a copy of the tree's layout, with a fake GPU (a sitecustomize that makes torch report
an RTX PRO 6000 Blackwell, sm_120, or an H200), flash_mla absent (it is not installed here), and stand-ins for
``python3 -m workbench ...``, ``nvidia-smi`` and ``compute-sanitizer`` that record how they were called."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from workbench.bench import providers

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_session.sh"
RTX = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
SM90_ONLY = ["wgmma_xchg", "wgmma_f16", "wgmma_f16_2cta", "wgmma_ws", "wgmma_ws_h64", "wgmma_ws_bal"]
# what runs on any GPU of sm_90 or newer, in the registry's order
ANY_GPU = ["simt", "mma", "tile512", "portable_ws", "portable_ws_h32q", "portable_ws_h32t", "portable_ws_h32p",
           "portable_ws_h32f"]


def test_script_parses():
    r = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr



def test_ncu_profiles_the_partial_kernel_of_every_split_rung():
    """NCU=impl=... profiles the kernel its --kernel-name regex matches: every split rung's partial kernel, not the
    combine (portable_ws's kernel was once named without "partial": ncu matched nothing and wrote no profile), and
    for NCU=flashmla=... FlashMLA's partial, not its combine (its kernel names, as ncu listed them on the H200 when
    the "partial" regex matched none: flash_fwd_splitkv_mla_fp8_sparse_kernel, flash_fwd_mla_combine_kernel)."""
    import re

    from workbench import registry
    from workbench.kernels.combine import combine_kernel
    from workbench.lab.resources import _wrapped
    text = SCRIPT.read_text()
    assert '--kernel-name "regex:$kname"' in text, "gpu_session.sh names the profiled kernel by a regex"
    ours = re.search(r"^\s*kname=(\w+);", text, re.M)
    theirs = re.search(r'\[ "\$impl" = flashmla \] && kname=(\w+)', text)
    assert ours and theirs
    for name in registry.names("split"):
        fn = list(_wrapped(registry.get(name).jit))[-1].__name__
        assert re.search(ours.group(1), fn), (name, fn)
    assert not re.search(ours.group(1), list(_wrapped(combine_kernel))[-1].__name__)
    assert re.search(theirs.group(1), "flash_fwd_splitkv_mla_fp8_sparse_kernel")
    assert not re.search(theirs.group(1), "flash_fwd_mla_combine_kernel")
    assert not re.search(ours.group(1), "flash_fwd_splitkv_mla_fp8_sparse_kernel")  # why FlashMLA needs its own


def _fake_gpu(monkeypatch, cap, name):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: cap)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    monkeypatch.setitem(sys.modules, "flash_mla", None)  # `import flash_mla` raises ImportError


def test_flashmla_line_on_sm120_names_the_gpu_and_the_reason_and_the_provider_skips_with_it(monkeypatch):
    _fake_gpu(monkeypatch, (12, 0), RTX)
    line = providers.flashmla_line()
    assert line == (f"flash_mla: not usable on this GPU ({RTX}, sm_120): FlashMLA's legacy MODEL1 kernel needs an "
                    "sm_90 GPU, and this one is sm_120; its bench and check rows are skipped with this reason")
    with pytest.raises(providers.Skip) as e:
        providers.make_provider("flashmla")
    assert str(e.value) == providers.flashmla_unusable() and str(e.value) in line


def test_flashmla_line_on_sm90_without_the_package(monkeypatch):
    _fake_gpu(monkeypatch, (9, 0), "NVIDIA H200")
    line = providers.flashmla_line()
    assert line.startswith("flash_mla: not usable on this GPU (NVIDIA H200, sm_90): flash_mla not importable (")
    assert "\n" not in line


SITECUSTOMIZE = '''
import os
if os.environ.get("FAKE_GPU"):
    import types
    import torch
    name, cap = os.environ["FAKE_GPU"].split(":")
    major, minor = int(cap[:-1]), int(cap[-1])
    torch.cuda.is_available = lambda: True
    torch.cuda.get_device_capability = lambda device=None: (major, minor)
    torch.cuda.get_device_name = lambda device=None: name
    torch.cuda.get_device_properties = lambda device=None: types.SimpleNamespace(
        name=name, multi_processor_count=188 if major == 12 else 132, major=major, minor=minor)
'''


def _run_session(tmp_path, fake_gpu: str, *sweeps: str, copy: tuple = (), check: bool = True, kill_when=None,
                 **env):
    """The script from a tree of links (so a .whl/ in the checkout is not installed), returning (stdout, calls);
    the folders in ``copy`` are copies, not links (a patch applied there must not reach the checkout).
    kill_when(out): polled while the script runs; once true, the script's process group is killed (SIGKILL, as a
    device call past its limit is), and the return is what $OUT then holds."""
    tree, bin_, site, out = (tmp_path / d for d in ("tree", "bin", "site", "out"))
    for d in (tree, bin_, site):
        d.mkdir()
    for name in ("workbench", "scripts", "golden", "tests", "data"):
        if name in copy:
            shutil.copytree(ROOT / name, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (tree / name).symlink_to(ROOT / name)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    calls = tmp_path / "calls.log"
    # `python3 -m workbench ...` is recorded (a check leaves a one-row table where --out and --name say, as the
    # merge of CHECK_JOBS parts reads); every other python3 is the real one
    (bin_ / "python3").write_text(f'''#!/usr/bin/env bash
if [ "$1" = "-m" ] && [ "$2" = "workbench" ]; then
  echo "python3 $*" >> "{calls}"
  echo "$3 $PWD $WORKBENCH_COMMIT" >> "{calls}.commits"
  if [ "$3" = "check" ]; then
    dir=""; name=""; prev=""
    for a in "$@"; do [ "$prev" = "--out" ] && dir="$a"; [ "$prev" = "--name" ] && name="$a"; prev="$a"; done
    [ -n "$dir" ] && [ -n "$name" ] && mkdir -p "$dir" && printf 'check,impl,passed\\nx,%s,True\\n' "${{dir##*/}}" > "$dir/$name"
  fi
  exit 0
fi
if [ "$1" = "-m" ] && [ "$2" = "pytest" ]; then
  echo "python3 $*" >> "{calls}"; exit 0
fi
if [ "${{1##*/}}" = explore.py ]; then  # recorded with the package it would import, and a one-row table at --csv
  echo "python3 $*" >> "{calls}"
  wb=$("{sys.executable}" -c "import sys; sys.path[0] = '$(dirname "$1")'; import workbench; print(workbench.__file__)")
  echo "explore $PWD $WORKBENCH_COMMIT $wb" >> "{calls}.commits"
  csv=""; prev=""; for a in "$@"; do [ "$prev" = "--csv" ] && csv="$a"; prev="$a"; done
  [ -n "$csv" ] && printf 'provider,median_us\nauto,1.0\n' > "$csv"
  case "$csv" in */baseline/*) [ "$EXPLORE_HANGS" = 1 ] && sleep 60;; esac
  exit 0
fi
if [ "${{1##*/}}" = cluster_share_probe.py ]; then
  echo "python3 $*" >> "{calls}"
  [ "$PROBE_HANGS" = 1 ] && sleep 30
  echo "check local   b2 topk256 page64: ok"; exit 0
fi
exec "{sys.executable}" "$@"
''')
    (bin_ / "nvidia-smi").write_text("#!/usr/bin/env bash\necho 'name, compute_cap'\necho 'fake GPU, 0.0'\n")
    (bin_ / "compute-sanitizer").write_text(f'''#!/usr/bin/env bash
echo "compute-sanitizer $*" >> "{calls}"; echo "========= ERROR SUMMARY: 0 errors"
''')
    for f in bin_.iterdir():
        f.chmod(0o755)
    run_env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "PYTHONPATH": str(site),
               "TRITON_INTERPRET": "1", "FAKE_GPU": fake_gpu, "OUT": str(out), "SKIP_PYTEST_GPU": "1",
               "WORKBENCH_COMMIT": "0" * 40, **env}
    if kill_when is not None:
        import signal
        import time
        proc = subprocess.Popen(["bash", str(SCRIPT), *sweeps], cwd=tree, env=run_env, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while proc.poll() is None and not kill_when(out) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, "the script ended before the condition held"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return out
    r = subprocess.run(["bash", str(SCRIPT), *sweeps], cwd=tree, env=run_env, capture_output=True, text=True,
                       timeout=300)
    if not check:
        return r
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout, (calls.read_text().splitlines() if calls.exists() else []), out


@pytest.mark.slow
def test_session_on_an_sm120_gpu_skips_flashmla_in_one_line_and_runs_only_what_runs_there(tmp_path):
    stdout, calls, out = _run_session(tmp_path, f"{RTX}:120", "headline", "ladder")
    lines = stdout.splitlines()
    flash = [ln for ln in lines if "flash_mla" in ln]
    assert len(flash) == 1 and flash[0].startswith(f"flash_mla: not usable on this GPU ({RTX}, sm_120): ")
    # said at the start, after the commit, nvidia-smi's two lines and the versions, before any step's output
    assert lines.index(flash[0]) == 4
    kernels = [ln for ln in lines if ln.startswith("kernels: ")]
    assert len(kernels) == 1 and kernels[0].startswith(f"kernels: {' '.join(SM90_ONLY)} do not run on this GPU (sm_120")
    assert [ln.split(":")[0] for ln in lines if ln.startswith("bench ")] == ["bench ladder"], "headline runs there"
    tag = "rtx_pro_6000_blackwell_workstation_edition"
    check = [c for c in calls if c.startswith("python3 -m workbench check ") and "--sanitize" not in c]
    assert len(check) == 1 and f"--name correctness_{tag}.csv" in check[0]
    assert check[0].endswith(f"--impls {' '.join(ANY_GPU)} auto")
    sanitized = [c.split("--sanitize ")[1] for c in calls if c.startswith("compute-sanitizer ")]
    assert sanitized == ANY_GPU
    benched = [c.split("--sweep ")[1].split()[0] for c in calls if " bench " in c]
    assert benched == ["headline", "ladder"]
    # the sanitizer logs' provenance names the GPU and its capability, as every table's rows do
    import json
    meta = json.loads((out / "sanitizer.meta.json").read_text())
    assert (meta["gpu"], meta["capability"], meta["sm_count"]) == (RTX, "sm_120", 188)


@pytest.mark.slow
def test_session_on_an_h200_checks_every_kernel_under_the_old_names(tmp_path):
    stdout, calls, _ = _run_session(tmp_path, "NVIDIA H200:90", "ladder", SKIP_SANITIZE="1", CHECK_JOBS="2")
    assert not [ln for ln in stdout.splitlines() if ln.startswith(("kernels: ", "bench "))]
    flash = [ln for ln in stdout.splitlines() if "flash_mla" in ln]
    assert len(flash) == 1 and "flash_mla not importable" in flash[0]  # not installed here
    parts = [c for c in calls if c.startswith("python3 -m workbench check ")]
    assert len(parts) == 2 and all("--name correctness_h200.csv" in c for c in parts)
    checked = [k for c in parts for k in c.split("--impls ")[1].split()]
    assert sorted(checked) == sorted([*ANY_GPU, *SM90_ONLY, "auto"])


@pytest.mark.parametrize("jobs, shards", [("2", None), ("7", 2)], ids=["2-jobs", "7-jobs"])
def test_check_jobs_beyond_the_kernels_split_each_kernels_cases(tmp_path, jobs, shards):
    """CHECK_JOBS=N over 3 kernels: N // 3 processes share each kernel's cases (check --shard; of 7 jobs, 6 run);
    with fewer jobs than kernels, the kernels are dealt out whole, as before. One merged table holds every
    process's rows."""
    kernels = ("wgmma_ws_h64", "auto", "wgmma_xchg")
    _, calls, out = _run_session(tmp_path, "NVIDIA H200:90", SKIP_SANITIZE="1", SKIP_BENCH="1", CHECK_JOBS=jobs,
                                 CHECK_IMPLS=" ".join(kernels))
    parts = [c.split("--impls ")[1].split() for c in calls if c.startswith("python3 -m workbench check ")]
    if shards is None:
        assert len(parts) == 2 and "--shard" not in " ".join(map(" ".join, parts))
        assert sorted(k for p in parts for k in p) == sorted(kernels)
    else:
        assert sorted(parts) == sorted([k, "--shard", f"{s}/{shards}"] for k in kernels for s in range(shards))
    merged = (out / "correctness_h200.csv").read_text().splitlines()
    assert len(merged) == 1 + len(parts), "the fake check writes one row a process"


def test_the_merged_check_keeps_the_processes_in_their_numbers_order_past_ten(tmp_path):
    """Twelve check processes (one kernel's cases in twelve shards): the merged table takes check_part10 and 11
    after check_part9, not after check_part1 as a sort by name would, so its rows keep one process's order."""
    _, _, out = _run_session(tmp_path, "NVIDIA H200:90", SKIP_SANITIZE="1", SKIP_BENCH="1", CHECK_JOBS="12",
                             CHECK_IMPLS="wgmma_ws_h64")
    import pandas as pd
    assert list(pd.read_csv(out / "correctness_h200.csv").impl) == [f"check_part{j}" for j in range(12)]


@pytest.mark.parametrize("hangs", [False, True], ids=["checks", "check-hangs"])
def test_cluster_probe_checks_first_and_times_only_if_the_check_ended(tmp_path, hangs):
    """CLUSTER_PROBE=1: the probe's check alone under a short timeout, then check and time into $OUT's table; a check
    that hangs (timeout, exit 124) is not followed by the timing run, and the call goes on."""
    stdout, calls, out = _run_session(tmp_path, "NVIDIA H200:90", SKIP_CHECK="1", SKIP_SANITIZE="1", SKIP_BENCH="1",
                                      CLUSTER_PROBE="1", PROBE_CHECK_TIMEOUT="2", PROBE_HANGS="1" if hangs else "0")
    probe = [c for c in calls if "cluster_share_probe.py" in c]
    first = "python3 scripts/cluster_share_probe.py --check"
    if hangs:
        assert probe == [first] and "# exit 124" in stdout
        assert not (out / "cluster_probe_time.log").exists()
    else:
        assert probe == [first, f"{first} --time --csv {out}/cluster_share.csv"]
        assert (out / "cluster_probe_time.log").read_text().rstrip().endswith("# exit 0")


def _chunk_patch(tmp_path, applies=True):
    """(patch, the checkout's line, its value): a patch of the combine's chunk constant, written against the
    checkout's file (one that does not apply: against a file whose constant differs from the checkout's)."""
    import difflib
    import re
    rel = "workbench/kernels/combine.py"
    text = (ROOT / rel).read_text()
    m = re.search(r"^S_CHUNK_MAX = (\d+)", text, re.M)
    assert m, "the combine names its chunk constant"
    line, value = m.group(0), int(m.group(1))
    patched_from = line if applies else f"S_CHUNK_MAX = {value + 1}"
    before = text.replace(line, patched_from)
    after = before.replace(patched_from, f"S_CHUNK_MAX = {value * 2}")
    patch = tmp_path / "explore_untimed_20990101-0000_fewer_chunks.patch"
    patch.write_text("".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{rel}",
                                                  f"b/{rel}")))
    return patch, line, value


@pytest.mark.parametrize("applies", [True, False], ids=["applies", "does-not-apply"])
def test_patches_are_timed_beside_the_tree_before_them(tmp_path, applies):
    """PATCHES=...: the patch is applied to the session's copy (check and sweeps run it, the rows named
    commit+patch, the kernel hash the patched code's), the tree before it is the baseline, timed with the same
    sweeps under the plain commit; a patch that does not apply stops the call before anything runs."""
    from workbench.report.provenance import kernel_source_hash
    patch, line, value = _chunk_patch(tmp_path, applies)
    sha = "0" * 40
    r = _run_session(tmp_path, "NVIDIA H200:90", "headline", copy=("workbench",), check=False, SKIP_SANITIZE="1",
                     PATCHES=str(patch), WORKBENCH_COMMIT=sha, TMPDIR=str(tmp_path))
    tree, calls = tmp_path / "tree", tmp_path / "calls.log.commits"
    if not applies:
        assert r.returncode == 3 and f"PATCHES: {patch} does not apply" in r.stdout, r.stdout[-2000:]
        assert not calls.exists(), "nothing ran"
        return
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    patched = tmp_path / "patched"
    shutil.copytree(ROOT / "workbench", patched / "workbench", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["git", "apply", str(patch)], cwd=patched, check=True)
    assert f"S_CHUNK_MAX = {value * 2}" in (patched / "workbench/kernels/combine.py").read_text()
    assert f"patched: kernel hash {kernel_source_hash(patched)}" in r.stdout, "the patched code ran"
    assert kernel_source_hash(patched) != kernel_source_hash(ROOT)
    assert line in (ROOT / "workbench/kernels/combine.py").read_text(), "the checkout is untouched"
    # taken back out at exit: a second session of the same device call starts from the tree it was given
    assert line in (tree / "workbench/kernels/combine.py").read_text(), r.stdout[-2000:]
    assert kernel_source_hash(tree) == kernel_source_hash(ROOT)
    runs = [ln.split() for ln in calls.read_text().splitlines()]
    ours = [(step, commit) for step, cwd, commit in runs if cwd == str(tree)]
    base = [(step, cwd, commit) for step, cwd, commit in runs if cwd != str(tree)]
    assert ours == [("check", f"{sha}+20990101-0000_fewer_chunks"), ("bench", f"{sha}+20990101-0000_fewer_chunks")]
    assert [(step, commit) for step, _, commit in base] == [("bench", sha)]
    assert line in (Path(base[0][1]) / "workbench/kernels/combine.py").read_text(), "the baseline is the tree before"


@pytest.mark.parametrize("files", [None, "tests/test_f16_window.py tests/test_kernels.py"], ids=["all", "two-files"])
def test_the_gpu_tests_step_runs_the_files_gpu_tests_names(tmp_path, files):
    env = {} if files is None else {"GPU_TESTS": files}
    _, calls, _ = _run_session(tmp_path, "NVIDIA H200:90", SKIP_CHECK="1", SKIP_SANITIZE="1", SKIP_BENCH="1",
                               SKIP_PYTEST_GPU="0", **env)
    runs = [c for c in calls if c.startswith("python3 -m pytest -m gpu ")]
    assert len(runs) == 1 and runs[0].endswith(" " + (files or "tests")), runs


def test_explore_runs_patched_and_then_in_the_tree_before_the_patches(tmp_path):
    """EXPLORE=... with PATCHES: scripts/explore.py with the same providers and arguments in the patched copy (rows
    commit+patch, $OUT/explore.csv) and then in the tree before it (the plain commit, $OUT/baseline/explore.csv)."""
    patch, line, _ = _chunk_patch(tmp_path)
    sha = "0" * 40
    stdout, calls, out = _run_session(tmp_path, "NVIDIA H200:90", copy=("workbench",), SKIP_CHECK="1",
                                      SKIP_SANITIZE="1", SKIP_BENCH="1", PATCHES=str(patch), WORKBENCH_COMMIT=sha,
                                      TMPDIR=str(tmp_path), EXPLORE="auto wgmma_ws_h64",
                                      EXPLORE_ARGS="--shape 64,128,2048 --shape 1,64,512")
    tree = tmp_path / "tree"
    runs = [c for c in calls if "explore.py" in c]
    assert len(runs) == 2 and all(c.split("explore.py ", 1)[1].startswith(
        "auto wgmma_ws_h64 --shape 64,128,2048 --shape 1,64,512 --csv ") for c in runs), runs
    assert runs[0].endswith(f"--csv {out}/explore.csv") and runs[1].endswith(f"--csv {out}/baseline/explore.csv")
    commits = [ln.split() for ln in (tmp_path / "calls.log.commits").read_text().splitlines()]
    assert [(c[1] == str(tree), c[2]) for c in commits] == [(True, f"{sha}+20990101-0000_fewer_chunks"),
                                                           (False, sha)]
    assert line in (Path(commits[1][1]) / "workbench/kernels/combine.py").read_text(), "the baseline is unpatched"
    # each run imports its own tree's package (the baseline's: not the patched copy's, nor the checkout's)
    assert Path(commits[0][3]).resolve() == (tree / "workbench" / "__init__.py").resolve()
    assert Path(commits[1][3]).resolve() == (Path(commits[1][1]) / "workbench" / "__init__.py").resolve()
    assert (out / "explore.csv").exists() and (out / "baseline" / "explore.csv").exists()
    assert "explore: exit 0" in stdout and "baseline explore: exit 0" in stdout


def test_bundle_puts_every_file_of_the_call_into_one_archive(tmp_path):
    """BUNDLE=1: the device tool returns at most 8 files of $OUT (one call of six sweeps lost 13 of its files so),
    so every file of the call, explore's table and its baseline's included, goes into $OUT/bundle.tgz, and nothing
    else is left in $OUT."""
    import tarfile
    patch, _, _ = _chunk_patch(tmp_path)
    stdout, _, out = _run_session(tmp_path, "NVIDIA H200:90", copy=("workbench",), SKIP_CHECK="1", SKIP_SANITIZE="1",
                                  SKIP_BENCH="1", PATCHES=str(patch), TMPDIR=str(tmp_path), EXPLORE="auto",
                                  EXPLORE_ARGS="--shape 64,128,2048", BUNDLE="1")
    assert sorted(p.name for p in out.iterdir()) == ["bundle.tgz", "steps.log"]  # the log also beside it
    with tarfile.open(out / "bundle.tgz") as t:
        names = {n.removeprefix("./") for n in t.getnames()}
    assert {"explore.csv", "explore.log", "baseline/explore.csv"} <= names, names
    assert "bundle: " in stdout


def test_sanitize_refuses_auto_with_a_line_and_runs_the_kernels_named(tmp_path):
    """SANITIZE_IMPLS names kernels: `auto` (which check --sanitize refuses, exit 255 before any launch) is said and
    skipped, the call's status non-zero; the kernels beside it still run."""
    r = _run_session(tmp_path, "NVIDIA H200:90", check=False, SKIP_CHECK="1", SKIP_SANITIZE="0", SKIP_BENCH="1",
                     SANITIZE_IMPLS="auto wgmma_ws")
    assert r.returncode == 1, r.stdout[-2000:]
    assert "sanitizer_auto: not run: auto is not a kernel" in r.stdout
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert [c.split("--sanitize ")[1] for c in calls if c.startswith("compute-sanitizer ")] == ["wgmma_ws"]


def test_a_killed_call_still_returns_the_bundle_of_the_steps_before(tmp_path):
    """BUNDLE=1 rewrites the archive after each step: a call killed past its limit (SIGKILL: no exit trap runs)
    returns the files of the steps that ended, here the patched explore's table while the baseline's run hangs, and
    steps.log beside the archive says which step it was killed in."""
    import tarfile

    def has_explore(out):
        steps = out / "steps.log"
        if not (steps.exists() and "baseline explore" in steps.read_text()):
            return False
        try:
            with tarfile.open(out / "bundle.tgz") as t:
                return "./explore.csv" in t.getnames()
        except (FileNotFoundError, tarfile.ReadError, EOFError):
            return False

    patch, _, _ = _chunk_patch(tmp_path)
    out = _run_session(tmp_path, "NVIDIA H200:90", copy=("workbench",), SKIP_CHECK="1", SKIP_SANITIZE="1",
                       SKIP_BENCH="1", PATCHES=str(patch), TMPDIR=str(tmp_path), EXPLORE="auto",
                       EXPLORE_ARGS="--shape 64,128,2048", BUNDLE="1", EXPLORE_HANGS="1", kill_when=has_explore)
    assert sorted(p.name for p in out.iterdir()) == ["bundle.tgz", "steps.log"]
    assert [line.split(" ", 1)[1] for line in (out / "steps.log").read_text().splitlines()] == [
        "setup", "explore", "baseline explore"]  # no exit line: killed in the baseline's explore
    with tarfile.open(out / "bundle.tgz") as t:
        names = set(t.getnames())
    assert {"./explore.csv", "./explore.log"} <= names and "./baseline/explore.csv" not in names, names


def test_a_misspelt_sweep_stops_the_call_before_anything_runs(tmp_path):
    """A sweep name the bench does not know (`sq2` for `s_q2`, as one call had it) is said at once with the names
    there are, exit 2, before the check or any sweep spends the call's device time."""
    r = _run_session(tmp_path, "NVIDIA H200:90", "headline", "sq2", check=False, SKIP_SANITIZE="1")
    assert r.returncode == 2, r.stdout[-2000:]
    assert "sweeps: sq2: not a sweep" in r.stdout and "s_q2" in r.stdout
    assert not (tmp_path / "calls.log").exists()


def test_pf2_memcheck_runs_its_script_under_memcheck(tmp_path):
    """PF2_MEMCHECK=1: scripts/memcheck_pf2.py under compute-sanitizer memcheck, beside the named kernels' cases."""
    _, calls, out = _run_session(tmp_path, "NVIDIA H200:90", SKIP_CHECK="1", SKIP_SANITIZE="0", SKIP_BENCH="1",
                                 SANITIZE_IMPLS="wgmma_ws_h64", PF2_MEMCHECK="1")
    runs = [c for c in calls if c.startswith("compute-sanitizer ")]
    assert runs[-1] == "compute-sanitizer --tool memcheck --print-limit 20 python3 scripts/memcheck_pf2.py", runs
    assert (out / "sanitizer_wgmma_ws_h64_pf2.log").read_text().startswith("# compute-sanitizer --tool memcheck")


def _memcheck_pf2_script():
    import importlib.util
    spec_ = importlib.util.spec_from_file_location("memcheck_pf2", ROOT / "scripts" / "memcheck_pf2.py")
    script = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(script)
    return script


@pytest.mark.parametrize("joined_launch", [True, False], ids=["joined_launch", "per_scope_launches"])
def test_the_pf2_memcheck_script_fails_a_joined_call_that_ran_no_joined_launch(monkeypatch, capsys, joined_launch):
    """The script records what rung 15's launcher hands to ``launch`` (grid, PF_AHEAD, JOINED), and fails its
    ``joined`` call unless a launch there ran at PF_AHEAD 2 with JOINED: a decode that went back to a launch per
    scope would run memcheck over a build the production sweep no longer times. (The GPU half, the call itself,
    is ``run_sanitizer_case``'s, stood in for here.)"""
    from workbench import gpu_check
    from workbench.kernels import wgmma_ws_h64
    script = _memcheck_pf2_script()
    launched = []

    def inner(kernel, grid, args):
        launched.append(args)
    monkeypatch.setattr(wgmma_ws_h64, "launch", inner)

    def call(impl, entry):
        joined = bool(entry.spec.get("extra_topk")) and joined_launch
        wgmma_ws_h64.launch(None, (2, 1, entry.spec["batch"]), dict(PF_AHEAD=2, JOINED=joined))
    monkeypatch.setattr(gpu_check, "run_sanitizer_case", call)
    assert script.main(["one-scope"]) == 0
    assert script.main(["joined"]) == (0 if joined_launch else 1)
    assert len(launched) == 2 and wgmma_ws_h64.launch is inner  # each launch passed on, the launcher put back
    assert ("no launch ran at PF_AHEAD 2 joined" in capsys.readouterr().err) != joined_launch
    assert script.main(["two-scopes"]) == 2


@pytest.mark.parametrize("num_sms", [132], ids=["h100_h200"])
def test_the_pf2_memcheck_cases_reach_two_tiles_ahead_and_no_catalogue_case_does(num_sms):
    """The split plans rung 15 runs at the script's two shapes (one scope, and the joined production sizes) give 2
    head groups splits of 512 tokens or more, so the launcher picks PF_AHEAD 2 (what the script then checks on the
    GPU); at every catalogue case and its GPU version it picks 1, which is why the script exists."""
    from workbench import decode, registry
    from workbench.format import cases as catalogue
    from workbench.kernels import wgmma_ws_h64
    script = _memcheck_pf2_script()
    rung = registry.get("wgmma_ws_h64")

    def pf(s):
        queries, heads = s["batch"] * s.get("s_q", 1), s["heads"]
        topks = [s["topk"]] + ([s["extra_topk"]] if s.get("extra_topk") else [])
        plans = decode.spec_split_plans(rung, queries=queries, heads=heads, topks=topks, num_sms=num_sms)
        return max(wgmma_ws_h64.prefetch_ahead(-(-heads // 64), p.tokens_per_split) for p in plans)

    for name, (entry_id, scale, joined) in script.CALLS.items():
        entry = script.case_entry(name)
        assert entry.id.startswith(f"{entry_id}@b{scale['batch']}-h128-") and pf(entry.spec) == 2, name
        assert bool(entry.spec.get("extra_topk")) == joined, name
    for e in catalogue.CATALOGUE:
        for c in (e, e.scaled()):
            if c is not None:
                assert pf(c.spec) == 1, c.id


def test_steps_log_stamps_each_step_and_the_exit(tmp_path):
    """$OUT/steps.log: one UTC time stamp as each step starts and one at exit with the call's status, in the order the
    steps ran, so the next call's limits can be planned from the gaps (a call's wall time alone does not say which
    step took it)."""
    import datetime
    _, _, out = _run_session(tmp_path, "NVIDIA H200:90", "headline", "ladder", SKIP_SANITIZE="1", CHECK_JOBS="1",
                             EXPLORE="auto", EXPLORE_ARGS="--shape 64,128,2048")
    lines = (out / "steps.log").read_text().splitlines()
    stamps, steps = zip(*(line.split(" ", 1) for line in lines))
    assert list(steps) == ["setup", "check", "bench headline", "bench ladder", "explore", "exit 0"], lines
    times = [datetime.datetime.strptime(t, "%Y-%m-%dT%H:%M:%SZ") for t in stamps]
    assert times == sorted(times)
