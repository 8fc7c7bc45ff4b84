"""Run every notebook through papermill into a new dated run folder.

    python -m workbench notebooks [-p NAME VALUE]... [-f params.yaml] [--only 02] [--publish] [--kernel NAME]

Parameters from -f (a YAML mapping; a key named after a notebook's stem holds that notebook's own
parameters) and -p (YAML-parsed values) are passed to every notebook that declares them. Executed
notebooks, figures and tables land in runs/<UTC date-time>/; an earlier run is never overwritten.
--publish also writes the figures and tables into figures/. A failing notebook stops the run with
a non-zero exit and names the executed copy, which shows the failing cell.
"""
from __future__ import annotations

import argparse
import datetime as dt
import shutil
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
KERNEL = "mla-workbench"


def notebook_paths(only: list[str] | None = None) -> list[Path]:
    paths = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    if only:
        paths = [p for p in paths if any(p.stem.startswith(o) or p.stem == o for o in only)]
        if not paths:
            raise SystemExit(f"--only {only}: no notebook matches in {NOTEBOOKS}")
    return paths


def new_run_dir(base: Path) -> Path:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    run = base / stamp
    n = 1
    while run.exists():  # never overwrite an earlier run
        n += 1
        run = base / f"{stamp}-{n}"
    run.mkdir(parents=True)
    return run


def declared_parameters(path: Path) -> set[str]:
    import papermill as pm
    return set(pm.inspect_notebook(str(path)).keys())


def run(params: dict, *, only=None, runs_dir: Path = ROOT / "runs", publish: bool = False, kernel: str = KERNEL,
        progress: bool = True) -> Path:
    import papermill as pm
    from tqdm.auto import tqdm
    run_dir = new_run_dir(Path(runs_dir))
    fig_dir = run_dir / "figures"
    paths = notebook_paths(only)
    for path in tqdm(paths, desc="notebooks", disable=not progress):
        declared = declared_parameters(path)
        p = {k: v for k, v in params.items() if not isinstance(v, dict) and k in declared}
        p.update({k: v for k, v in params.get(path.stem, {}).items()})
        p.setdefault("out_dir", str(fig_dir))
        p.setdefault("data_dir", str(ROOT / "data"))
        unknown = set(p) - declared
        if unknown:
            raise SystemExit(f"{path.name}: parameters {sorted(unknown)} are not in its parameters cell "
                             f"(it declares {sorted(declared)})")
        out = run_dir / path.name
        try:
            pm.execute_notebook(str(path), str(out), parameters=p, kernel_name=kernel, cwd=str(NOTEBOOKS),
                                progress_bar=False)
        except pm.PapermillExecutionError as e:
            print(f"\nFAILED: {path.name}, cell {e.exec_count}: {e.ename}: {e.evalue}\n"
                  f"The executed notebook with the failing cell: {out}", file=sys.stderr)
            raise SystemExit(1) from None
    if publish:
        dest = ROOT / "figures"
        dest.mkdir(exist_ok=True)
        for f in fig_dir.iterdir():
            shutil.copy2(f, dest / f.name)
    print(f"run folder: {run_dir}\nfigures: {sorted(f.name for f in fig_dir.glob('*.png'))}")
    return run_dir


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workbench notebooks", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    ap.add_argument("-f", "--parameters-file", type=Path)
    ap.add_argument("--only", nargs="*", help="notebook name prefixes, e.g. 01 03")
    ap.add_argument("--runs-dir", type=Path, default=ROOT / "runs")
    ap.add_argument("--publish", action="store_true", help="also copy figures and tables into figures/")
    ap.add_argument("--kernel", default=KERNEL, help=f"Jupyter kernel name (default: the project's {KERNEL})")
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    params: dict = {}
    if a.parameters_file:
        params.update(yaml.safe_load(a.parameters_file.read_text()) or {})
    for k, v in a.parameter:
        params[k] = yaml.safe_load(v)
    run(params, only=a.only, runs_dir=a.runs_dir, publish=a.publish, kernel=a.kernel, progress=not a.no_progress)
    return 0
