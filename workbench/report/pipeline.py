"""Run every notebook through papermill into a new dated run folder, and check every notebook's parameters.

    python -m workbench notebooks [-p NAME VALUE]... [-f params.yaml | -f folder] [--only 02] [--publish] [--force]

Parameters from -f and -p (YAML-parsed values) are passed to every notebook that declares them; a parameter
no notebook declares in its `parameters` cell is an error. -f takes a YAML mapping, where a key named after a
notebook's stem holds that notebook's own parameters, or a folder of papermill parameter files, one a notebook,
named after it (`notebooks/tiny/` is the smallest set: `notebooks/tiny/02_correctness.yaml` is also what plain
`papermill notebooks/02_correctness.ipynb out.ipynb -f notebooks/tiny/02_correctness.yaml` takes). Every
notebook's parameters are type-checked (``checked_parameters``) before the first notebook starts, and a wrong
one stops the run with one line. Executed notebooks, figures and tables land in runs/<UTC date-time>/; an
earlier run is never overwritten. --publish also copies the figures and tables into figures/; it refuses a
reduced parameter set (notebooks/tiny/, or any grid smaller than a notebook's defaults) unless --force. A
failing notebook stops the run with a non-zero exit and names the executed copy, which shows the failing cell.

-p out_dir DIR sends the figures and tables to DIR instead of the run folder's figures/ (and
-p data_dir DIR reads the tables from DIR); both are relative to the current folder, as any command's path is.
(Run by papermill or Jupyter without this command, a notebook takes a relative out_dir or data_dir from the
repository root, wherever it runs: ``checked_parameters``.) An out_dir or --runs-dir inside the repository's
data/ or figures/ is refused: only publishing adds to those. An out_dir that has files in it already is refused
unless --force (then files of the same names are replaced); --publish copies the run folder's own figures/ and
so is refused with -p out_dir, which keeps --force's two meanings apart.

Every notebook's set-up cell calls ``checked_parameters`` right after its parameters cell (and after the
interpreter switch, which must precede importing workbench), so papermill, Jupyter and this command all get
the same checks: booleans accept true/false (any case, as papermill's -p passes them, as strings) besides real
bools; an integer, list or choice of the wrong type or value is one line naming the parameter, its expected
type and its default (a single value where a list is expected is taken as a one-element list: -p heads_grid 5
is [5]); device cuda without a CUDA GPU is one line; relative paths are taken from the repository root.
"""
from __future__ import annotations

import argparse
import ast
import datetime as dt
import difflib
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
KERNEL = "mla-workbench"
# The kernel's own logging: ipykernel warns that its local TCP sockets are unencrypted on every start.
KERNEL_ARGS = ["--IPKernelApp.log_level=ERROR"]
# Parameters the pipeline sets itself when not given; every notebook declares them.
PIPELINE_DEFAULTS = ("out_dir", "data_dir")
NOT_A_SIZE = ("seed",)  # integer parameters that are not grid sizes (every other integer is a size: 1 or more)
# Parameters that name a folder: a relative one is taken from the repository root (ROOT), never the current folder.
PATH_PARAMETERS = PIPELINE_DEFAULTS
# Booleans as text (papermill's -p passes `-p fresh false` as the string "false"; YAML's words too); any case.
BOOL_WORDS = {"true": True, "false": False, "yes": True, "no": False, "on": True, "off": False, "1": True, "0": False}
# The values a string parameter (or each item of a list of strings) may take, where there is a fixed set.
CHOICES = {
    "device": lambda: ("cpu", "cuda"),
    "sweep": lambda: __import__("workbench.bench.sweeps", fromlist=["SWEEPS"]).SWEEPS,
    "archs": lambda: tuple(__import__("workbench.lab.targets", fromlist=["TARGETS"]).TARGETS),
}
# Notebook parameters that need a CUDA GPU when true, and what they do then.
NEEDS_CUDA = {"04_throughput": {"fresh": "measures a new sweep"}}


def all_notebooks() -> list[Path]:
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def notebook_paths(only: list[str] | None = None) -> list[Path]:
    """The notebooks to run: all, or those whose stem starts with one of ``only``; an unmatched name is an error."""
    paths = all_notebooks()
    if not only:
        return paths
    unmatched = [o for o in only if not any(p.stem.startswith(o) for p in paths)]
    if unmatched:
        raise SystemExit(f"--only {' '.join(unmatched)}: no such notebook; the notebooks are "
                            f"{', '.join(p.stem for p in paths)}")
    return [p for p in paths if any(p.stem.startswith(o) for o in only)]


def new_run_dir(base: Path, label: str = "") -> Path:
    """A new folder ``base/<UTC date-time>[-label]``; never an existing one."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S") + (f"-{label}" if label else "")
    run = base / stamp
    n = 1
    while run.exists():  # never overwrite an earlier run
        n += 1
        run = base / f"{stamp}-{n}"
    run.mkdir(parents=True)
    return run


# The repository's folders that only a publish step adds to, and that step: `python -m workbench publish` (or
# check/bench --publish) adds a dated table to data/; `python -m workbench notebooks --publish` refreshes figures/.
PUBLISH_STEP = {"data": "python -m workbench publish <run's table>, or --publish on check/bench",
                "figures": "python -m workbench notebooks --publish"}


class RefusedOutput(ValueError):
    """An output path refused before anything is written. One line wherever it surfaces: the CLI prints it, and
    in a notebook IPython shows ``_render_traceback_`` in place of a traceback."""

    def _render_traceback_(self):
        return [f"{type(self).__name__}: {self}"]


def published_folder(path) -> str | None:
    """"data" or "figures" when ``path`` is the repository's folder of that name or anything under it, at any depth,
    after resolving symlinks, '..' and a relative path (against the current folder); else None."""
    p = Path(path).resolve()
    return next((name for name in PUBLISH_STEP if p.is_relative_to((ROOT / name).resolve())), None)


def refuse_published(path, what: str, shown=None) -> Path:
    """``path`` as a Path, or RefusedOutput when it is in the repository's data/ or figures/ (only publishing adds
    to those). ``what`` names where the path came from ("--out", "out_dir") in the one-line message, and ``shown``
    the path as the user typed it, where ``path`` is already resolved from it."""
    name = published_folder(path)
    if name is not None:
        shown = path if shown is None else shown
        raise RefusedOutput(f"{what} {shown}: is inside {name}/ ({(ROOT / name).resolve()}), and only publishing adds "
                            f"to {name}/ ({PUBLISH_STEP[name]}); write somewhere outside data/ and figures/")
    return Path(path)


def check_out_folder(path, *, force: bool = False, what: str = "--out") -> Path:
    """An output folder a user named, checked before anything runs or is written; creates nothing.

    Refused (RefusedOutput, one line): a path inside data/ or figures/ (``refuse_published``), an existing file
    (or a path under one), and a folder that has anything in it already unless ``force`` (its files of the same
    names would be replaced). A new path and an empty folder pass. Returns ``path`` as a Path.
    """
    out = refuse_published(path, what)
    p = out.resolve()
    if p.is_dir():
        if not force and any(p.iterdir()):
            raise RefusedOutput(f"{what} {path}: is a folder with files in it already (those of the same names "
                                "would be replaced); name a new or empty folder, or add --force")
    elif p.exists():
        raise RefusedOutput(f"{what} {path}: is a file, not a folder")
    else:
        above = next(a for a in p.parents if a.exists())
        if not above.is_dir():
            raise RefusedOutput(f"{what} {path}: {above} is a file, not a folder")
    return out


def declared_parameters(path: Path) -> dict:
    """A notebook's parameters cell (the code cell tagged "parameters") as {name: default value}.

    Read with ``ast`` from the .ipynb itself, as papermill finds the cell, but without starting papermill;
    a default that is not a literal is kept as its source text.
    """
    cells = json.loads(path.read_text())["cells"]
    cell = next((c for c in cells if c["cell_type"] == "code" and "parameters" in c["metadata"].get("tags", [])),
                None)
    if cell is None:
        return {}
    src = "".join(cell["source"])
    out = {}
    for node in ast.parse(src).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    try:
                        out[t.id] = ast.literal_eval(node.value)
                    except ValueError:
                        out[t.id] = ast.get_source_segment(src, node.value)
    return out


class ParameterError(ValueError):
    """A notebook parameter of the wrong type or value, or one this machine cannot serve (device cuda without a
    GPU). One line wherever it surfaces: the pipeline exits with it before any notebook starts, and in a notebook
    IPython shows ``_render_traceback_`` in place of a traceback."""

    def _render_traceback_(self):
        return [f"{type(self).__name__}: {self}"]


def notebook_path(stem: str) -> Path:
    """The notebook named ``stem`` (e.g. "03_occupancy") in the repository's notebooks/ folder."""
    path = NOTEBOOKS / f"{stem}.ipynb"
    if not path.is_file():
        raise ParameterError(f"{stem!r}: no such notebook; the notebooks are "
                             f"{', '.join(p.stem for p in all_notebooks())}")
    return path


def repo_path(path) -> Path:
    """A folder parameter as an absolute path: ``~`` expanded, a relative path taken from the repository root
    (not from the current folder, which depends on how the notebook was started), '..' folded."""
    return Path(os.path.normpath(ROOT / Path(path).expanduser()))


def _shown(v) -> str:
    return f"{v!r} ({type(v).__name__})"


def _from_text(value):
    """A string parameter read as YAML where the default is not a string (papermill's -p passes "[1, 5]" and
    "false" as text); the string itself where it is not YAML."""
    if not isinstance(value, str):
        return value
    try:
        return yaml.safe_load(value)
    except yaml.YAMLError:
        return value


def _item(name: str, value, default):
    """``value`` as the type of ``default`` (one scalar or mapping), or None where it is not one."""
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in BOOL_WORDS:
            return BOOL_WORDS[value.strip().lower()]
        return None
    if isinstance(default, int):
        value = _from_text(value)
        if isinstance(value, bool) or not isinstance(value, int) or (name not in NOT_A_SIZE and value < 1):
            return None
        return value
    if isinstance(default, float):
        value = _from_text(value)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if isinstance(default, str):
        if name in PATH_PARAMETERS:
            return str(value) if isinstance(value, (str, os.PathLike)) and str(value).strip() else None
        choices = CHOICES.get(name)
        if not isinstance(value, str) or (choices and value not in choices()):
            return None
        return value
    if isinstance(default, dict):
        value = _from_text(value)
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            return None
        out = {}
        for k, v in value.items():  # keys among the default's; an integer where the default has one
            if k not in default:
                return None
            if isinstance(default[k], int) and not isinstance(default[k], bool):
                v = _from_text(v)
                if isinstance(v, bool) or not isinstance(v, int):
                    return None
            out[k] = v
        return out
    return value  # a default this check has no type for: taken as given


def _expected(name: str, default) -> str:
    """What ``_item`` accepts for ``default``, in words."""
    if isinstance(default, bool):
        return "true or false"
    if isinstance(default, int):
        return "an integer" if name in NOT_A_SIZE else "a positive integer"
    if isinstance(default, float):
        return "a number"
    if isinstance(default, str):
        if name in PATH_PARAMETERS:
            return "a folder (a relative one is taken from the repository root)"
        choices = CHOICES.get(name)
        return f"one of {', '.join(choices())}" if choices else "a string"
    if isinstance(default, dict):
        return f"a mapping with keys among {', '.join(default)}"
    return "a value"


def check_parameter(name: str, value, default):
    """``value`` as the type of its ``default`` (from the parameters cell), or ParameterError in one line.

    Booleans: bools, 0/1, or true/false/yes/no/on/off as text in any case. Integers: a size is 1 or more (every
    integer parameter but those in NOT_A_SIZE). Strings: one of CHOICES where the name has a fixed set; a folder
    parameter stays as given (``checked_parameters`` resolves it). Lists: a list (or YAML text of one), each item
    of the default's item type; a single item is taken as a one-element list (-p heads_grid 5 is [5]); an empty
    list is refused."""
    if isinstance(default, list) and default:
        items = _from_text(value)
        items = items if isinstance(items, (list, tuple)) else [items]
        checked = [_item(name, v, default[0]) for v in items]
        if not items or any(c is None for c in checked):
            raise ParameterError(f"{name}: expected a list, each {_expected(name, default[0])} (one alone is a list "
                                 f"of one), got {_shown(value)}; default {default!r}")
        return checked
    checked = _item(name, value, default)
    if checked is None:
        raise ParameterError(f"{name}: expected {_expected(name, default)}, got {_shown(value)}; default {default!r}")
    return checked


def _needs_cuda(what: str, hint: str) -> None:
    import torch
    if not torch.cuda.is_available():
        raise ParameterError(f"{what} needs a CUDA GPU, and this torch ({torch.__version__}) sees none; {hint}")


def checked_parameters(stem: str, given, *, check_folders: bool = True) -> dict:
    """The parameters of notebook ``stem``, checked and converted: what every notebook's set-up cell calls, as
    ``globals().update(checked_parameters("03_occupancy", globals()))``, and what the pipeline checks up front.

    ``given``: a mapping holding some or all of the names the notebook's parameters cell declares (a notebook's
    own globals, after papermill's injected cell); a missing name takes the cell's default. Returns
    {name: value} for every declared name, each value of its default's type (``check_parameter``), and:
    - out_dir and data_dir absolute, a relative one taken from the repository root (``repo_path``), so a notebook
      reads and writes the same folders from wherever papermill or Jupyter started it; a relative one that leads
      out of the repository ("../x") is refused (only an absolute path goes outside the clone), and so is an
      out_dir inside the repository's data/ or figures/ (RefusedOutput: only publishing adds there);
    - with ``check_folders``, data_dir must be an existing folder;
    - device cuda needs a CUDA GPU here, and so does a NEEDS_CUDA parameter that is true (notebook 04's fresh).
    Raises ParameterError (or RefusedOutput), one line, before the notebook computes anything.
    """
    declared = declared_parameters(notebook_path(stem))
    values = {name: check_parameter(name, given.get(name, default), default) for name, default in declared.items()}
    for name in PATH_PARAMETERS:
        if name in values:
            raw = given.get(name, declared[name])
            values[name] = str(repo_path(values[name]))
            if not Path(str(raw)).expanduser().is_absolute() and not Path(values[name]).is_relative_to(ROOT):
                raise ParameterError(f"{name} {raw}: a relative folder is taken from the repository root ({ROOT}), "
                                     f"and this one leads out of it ({values[name]}); name a folder inside the "
                                     "repository, or give an absolute path")
            if name == "out_dir":
                refuse_published(values[name], name, shown=raw)
            elif check_folders and not Path(values[name]).is_dir():
                raise ParameterError(f"{name} {raw}: no such folder ({values[name]}; a relative path is taken from "
                                     f"the repository root, {ROOT})")
    if "gpu" in values and not values.get("fresh") and Path(values.get("data_dir", "")).is_dir():
        from .results import _chosen_gpu, bench_gpus
        present = bench_gpus(values["data_dir"])
        try:  # here, not in the notebook's third cell: a typo'd GPU is one line before anything runs
            _chosen_gpu(values["gpu"], present)
        except ValueError:
            raise ParameterError(f"gpu {values['gpu']!r}: no bench table of that GPU in {values['data_dir']}; the "
                                 f"GPUs with tables there: {', '.join(present) or 'none'} (name one as the tables "
                                 "write it)") from None
    device = values.get("device", "cpu")
    if device == "cuda":
        _needs_cuda("device cuda", "leave device at cpu to run the kernels in the Triton interpreter")
    for name, what in NEEDS_CUDA.get(stem, {}).items():
        if values.get(name) and device != "cuda":
            raise ParameterError(
                f"{name}=True {what} and needs a CUDA GPU (device={device!r}); on this machine run with -p {name} "
                "false to use the committed tables in data/, or on a GPU with -p device cuda")
    return values


def _unknown(name: str, known, where: str) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown parameter {name!r}{hint}; the parameters of {where} are: {', '.join(sorted(known))}"


def notebook_parameters(params: dict, declared: dict[str, dict], selected: list[str]) -> dict[str, dict]:
    """Split -p/-f parameters per notebook; exit with one line on a parameter or section nobody declares.

    params: top-level values, and mappings keyed by a notebook stem for that notebook only.
    declared: every notebook's {stem: {name: default}}; selected: the stems that will run.
    """
    known = set().union(*declared.values())
    for key, value in params.items():
        if isinstance(value, dict):
            if key not in declared:
                raise SystemExit(f"{key!r}: a mapping in the parameters names a notebook, and there is no "
                                    f"such notebook; the notebooks are {', '.join(declared)}")
            for name in value:
                if name not in declared[key]:
                    raise SystemExit(_unknown(name, declared[key], key))
        elif key not in known:
            raise SystemExit(_unknown(key, known, "the notebooks"))
    out = {}
    for stem in selected:
        p = {k: v for k, v in params.items() if not isinstance(v, dict) and k in declared[stem]}
        p.update(params.get(stem, {}))
        out[stem] = p
    return out


def reductions(per_notebook: dict[str, dict], declared: dict[str, dict]) -> list[str]:
    """The given parameters that shrink a notebook's default grid: a list missing default entries, a smaller
    size, or something other than a default of "all". Such a run must not replace the published figures."""
    found = []
    for stem, params in per_notebook.items():
        for name, value in params.items():
            default = declared[stem].get(name)
            if isinstance(default, list):
                smaller = not isinstance(value, list) or any(d not in value for d in default)
            elif isinstance(default, int) and not isinstance(default, bool) and name not in NOT_A_SIZE:
                smaller = isinstance(value, (int, float)) and value < default
            elif default == "all":
                smaller = value != "all"
            else:
                smaller = False
            if smaller:
                found.append(f"{stem} {name}={value!r} (default {default!r})")
    return found


def other_gpus(per_notebook: dict[str, dict], declared: dict[str, dict]) -> list[str]:
    """The given ``gpu`` parameters that name another GPU than the notebook's default (the reference GPU whose
    tables data/'s figures draw): such a run draws that GPU's tables, and must not be published over figures/."""
    return [f"{stem} gpu={params['gpu']!r} (default {declared[stem]['gpu']!r})"
            for stem, params in per_notebook.items()
            if "gpu" in params and params["gpu"] != declared[stem].get("gpu")]


DRAWN_GPU = "drawn_gpu_{}"  # a notebook's record of the GPU whose tables it drew (figures.record_drawn_gpu)


def refuse_other_gpus(fig_dir: Path, run_dir: Path) -> None:
    """Before publishing: every notebook's record of the GPU it drew (``figures.record_drawn_gpu``) names the
    reference GPU, else SystemExit in one line (the run folder keeps the figures). This catches what the ``gpu``
    parameter does not: a data_dir of another GPU's tables, or a fresh sweep on another GPU."""
    import pandas as pd

    from .results import REFERENCE_GPU
    drawn = [pd.read_csv(p) for p in sorted(Path(fig_dir).glob(DRAWN_GPU.format("*") + ".csv"))]
    other = sorted({f"{r.notebook} drew {r.gpu}" for d in drawn for r in d.itertuples() if r.gpu != REFERENCE_GPU})
    if other:
        raise SystemExit(f"--publish refused: figures/ holds {REFERENCE_GPU}'s figures, and {'; '.join(other)}; "
                         f"the figures stay in {run_dir}")


def default_jobs() -> int:
    """Notebooks run at once by default on the CPU: one per core, at most two (each is a kernel process; they share
    data/, which they only read, and the run's figures/ folder, where each writes files of its own names). With
    device cuda they run one at a time, so that no notebook times kernels while another runs on the same GPU."""
    return max(1, min(2, os.cpu_count() or 1))


def run(params: dict, *, only=None, runs_dir: Path = ROOT / "runs", publish: bool = False, force: bool = False,
        kernel: str = KERNEL, progress: bool = True, jobs: int | None = None) -> Path:
    paths = notebook_paths(only)  # every refusal comes before papermill starts and before the run folder exists
    declared = {p.stem: declared_parameters(p) for p in all_notebooks()}
    per_notebook = notebook_parameters(params, declared, [p.stem for p in paths])
    reduced = reductions(per_notebook, declared)
    if publish and reduced and not force:
        raise SystemExit(f"--publish refused: a reduced parameter set ({'; '.join(reduced)}) would replace "
                            "figures/ with a smaller run; drop those parameters, or add --force to publish it")
    other_gpu = other_gpus(per_notebook, declared)
    if publish and other_gpu:  # no --force: figures/ names no GPU, so this would put another GPU's under the H200's
        raise SystemExit(f"--publish refused: figures/ holds the reference GPU's figures (the default gpu), and "
                         f"{'; '.join(other_gpu)} would replace them with another GPU's under the same names; "
                         "run without --publish (the run folder keeps them)")
    out_dirs = sorted({str(p["out_dir"]) for p in per_notebook.values() if "out_dir" in p})
    if publish and out_dirs:
        raise SystemExit(f"--publish refused: it copies the run folder's own figures/, and -p out_dir "
                         f"{', '.join(out_dirs)} sends them elsewhere; leave out_dir out to publish")
    try:
        refuse_published(runs_dir, "--runs-dir")
        for d in out_dirs:  # once, before any notebook: the notebooks share the folder
            check_out_folder(d, force=force, what="out_dir")
    except RefusedOutput as e:
        raise SystemExit(str(e)) from None
    for p in per_notebook.values():  # relative to where the command was typed; the kernels run in notebooks/
        for name in PIPELINE_DEFAULTS:
            if name in p:
                p[name] = str(Path(str(p[name])).absolute())
    for stem, p in per_notebook.items():  # every notebook's types, choices and device, before the first one runs
        try:
            checked = checked_parameters(stem, p, check_folders=False)
        except (ParameterError, RefusedOutput) as e:
            raise SystemExit(f"{stem}: {e}") from None
        p.update({name: checked[name] for name in p})  # as the notebook will see them: -p heads_grid 5 is [5]
    import papermill as pm
    run_dir = new_run_dir(Path(runs_dir).absolute())  # absolute: papermill changes the process's folder per run
    fig_dir = run_dir / "figures"
    bar = _progress(len(paths), progress)

    def execute(path):
        p = dict(per_notebook[path.stem])
        p.setdefault("out_dir", str(fig_dir))
        p.setdefault("data_dir", str(ROOT / "data"))
        out = run_dir / path.name
        t0 = time.monotonic()
        try:
            pm.execute_notebook(str(path), str(out), parameters=p, kernel_name=kernel, cwd=str(NOTEBOOKS),
                                progress_bar=False, extra_arguments=KERNEL_ARGS)
        except pm.PapermillExecutionError as e:
            bar.done(f"{path.stem} FAILED", time.monotonic() - t0)
            return (f"FAILED: {path.name}, cell {e.exec_count}: {e.ename}: {e.evalue}\n"
                    f"The executed notebook with the failing cell: {out}")
        bar.done(path.stem, time.monotonic() - t0)
        return None

    from concurrent.futures import ThreadPoolExecutor
    # on a GPU one notebook at a time: two would share it while one of them times kernels
    on_gpu = any(p.get("device") == "cuda" for p in per_notebook.values())
    cwd = os.getcwd()  # papermill changes the process's folder for each run and restores it: threads interleave that
    try:
        with ThreadPoolExecutor(max_workers=1 if on_gpu else max(1, jobs or default_jobs())) as pool:
            failures = [f for f in pool.map(execute, paths) if f]  # every notebook runs to its end, in paths order
    finally:
        os.chdir(cwd)
    bar.close()
    if failures:
        print("\n" + "\n".join(failures), file=sys.stderr)
        raise SystemExit(1)
    if publish:
        refuse_other_gpus(fig_dir, run_dir)
        dest = ROOT / "figures"
        dest.mkdir(exist_ok=True)
        for f in fig_dir.iterdir():
            shutil.copy2(f, dest / f.name)
    print(f"run folder: {run_dir}\nfigures: {sorted(f.name for f in fig_dir.glob('*.png'))}")
    return run_dir


class _progress:
    """A bar on a terminal; one line per notebook otherwise (a log shows each state once, the last one too)."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled, self.n = total, enabled, 0
        self.lock = threading.Lock()
        self.tty = enabled and sys.stderr.isatty()
        self.bar = None
        if self.tty:
            from tqdm.auto import tqdm
            self.bar = tqdm(total=total, desc="notebooks", file=sys.stderr)

    def done(self, name: str, seconds: float):
        with self.lock:  # notebooks may finish at once (--jobs)
            self.n += 1
            if self.bar is not None:
                self.bar.set_postfix_str(name)
                self.bar.update(1)
            elif self.enabled:
                print(f"notebooks: {self.n}/{self.total} {name} ({seconds:.0f} s)", file=sys.stderr, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _yaml_mapping(path: Path) -> dict:
    try:
        loaded = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise SystemExit(f"-f {path}: not YAML ({' '.join(str(e).split())})") from None
    if not isinstance(loaded, dict):
        raise SystemExit(f"-f {path}: expected a mapping of parameter names to values, got {type(loaded).__name__}")
    return loaded


def parameters_from(path: Path) -> dict:
    """-f: a YAML file's mapping as it is, or a folder's papermill parameter files as {notebook stem: parameters}
    (each ``<stem>.yaml`` is the one file plain papermill takes for that notebook; a notebook without one gets
    none, and a file named after no notebook is an error, reported by ``notebook_parameters``)."""
    if path.is_dir():
        files = sorted(path.glob("*.yaml")) + sorted(path.glob("*.yml"))
        if not files:
            raise SystemExit(f"-f {path}: a folder without parameter files (<notebook>.yaml)")
        return {f.stem: _yaml_mapping(f) for f in files}
    if not path.is_file():
        raise SystemExit(f"-f {path}: no such file or folder")
    return _yaml_mapping(path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workbench notebooks", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    ap.add_argument("-f", "--parameters-file", type=Path, metavar="FILE_OR_FOLDER",
                    help="a YAML mapping (a key named after a notebook holds its own parameters), or a folder of "
                         "papermill parameter files named after the notebooks (notebooks/tiny: the smallest set)")
    ap.add_argument("--only", nargs="+", help="notebook name prefixes, e.g. 01 03")
    ap.add_argument("--runs-dir", type=Path, default=ROOT / "runs")
    ap.add_argument("--publish", action="store_true", help="also copy figures and tables into figures/")
    ap.add_argument("--force", action="store_true",
                    help="with --publish: publish a reduced parameter set too; with -p out_dir: write into a "
                         "folder that has files already (--publish and -p out_dir are refused together)")
    ap.add_argument("--kernel", default=KERNEL, help=f"Jupyter kernel name (default: the project's {KERNEL})")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--jobs", type=int, default=None, metavar="N",
                    help=f"notebooks run at once (default: one per core, at most 2; here {default_jobs()})")
    a = ap.parse_args(argv)
    if a.jobs is not None and a.jobs < 1:
        ap.error(f"--jobs: expected a positive integer, got {a.jobs}")
    params: dict = {}
    if a.parameters_file:
        params.update(parameters_from(a.parameters_file))
    for k, v in a.parameter:
        params[k] = yaml.safe_load(v)
    run(params, only=a.only, runs_dir=a.runs_dir, publish=a.publish, force=a.force, kernel=a.kernel,
        progress=not a.no_progress, jobs=a.jobs)
    return 0
