"""Command line: ``python -m workbench {check,bench,resources,publish,notebooks} ...``.

Measuring commands write into a new folder under runs/ unless --out names one; only ``--publish`` (or
``publish`` on an earlier run's table) adds to data/, as a new dated table that never replaces a file.
--out is refused inside data/ or figures/, on a file, and on a folder with files in it unless --force.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "runs"
DATA = ROOT / "data"
PUBLISHABLE = ("bench", "correctness")  # table kinds data/ holds, by the first word of the file name
CPU_PATH = ("on a CPU, run the notebooks (bash scripts/run_notebooks.sh; they read the measured tables in data/) "
            "or the tests, which run the kernels under TRITON_INTERPRET=1 (bash scripts/test.sh)")


def _needs_cuda(what: str) -> int:
    """0 when CUDA is here; else say what is needed and where the CPU path is, in one line, and return 1."""
    import torch
    if torch.cuda.is_available():
        return 0
    print(f"{what} needs a CUDA GPU, and this torch ({torch.__version__}) sees none; {CPU_PATH}.", file=sys.stderr)
    return 1


def _refused_out(a) -> int:
    """0 when --out is absent or usable; else one line and 2. Runs first, before the CUDA check: nothing runs or
    is written for a refused --out (inside data/ or figures/, a file, or a folder with files unless --force), or
    for a --name that is a path (it would lead out of the folder)."""
    if Path(a.name).name != a.name or a.name in ("", ".", ".."):
        print(f"{a.cmd}: --name {a.name}: a file name, not a path (--out names the folder)", file=sys.stderr)
        return 2
    if not a.out:
        return 0
    from .report.pipeline import RefusedOutput, check_out_folder
    try:
        check_out_folder(a.out, force=a.force)
    except RefusedOutput as e:
        print(f"{a.cmd}: {e}", file=sys.stderr)
        return 2
    return 0


def _out_dir(a, label: str) -> Path:
    """--out exactly as given (checked by ``_refused_out``), or a new runs/<UTC date-time>-<label>/ (never data/)."""
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        return out
    from .report.pipeline import new_run_dir
    return new_run_dir(RUNS, label)


def _cmd_check(a):
    from .format.cases import SANITIZER
    if a.sanitize and a.shard:
        print("check: --shard splits the table's cases; --sanitize runs one case", file=sys.stderr)
        return 2
    if not a.sanitize and (a.case != SANITIZER or a.combine != "rule"):
        print("check: --case and --combine choose the case of --sanitize; give --sanitize KERNEL", file=sys.stderr)
        return 2
    if rc := _refused_out(a):
        return rc
    what = f"check --sanitize {a.sanitize}" if a.sanitize else "check"
    if rc := _needs_cuda(what):
        return rc
    import pandas as pd

    from .gpu_check import partial_writer, run_checks, sanitizer_case, write_table
    if a.sanitize:
        sanitizer_case(a.sanitize, case_id=a.case, pdl={"rule": None, "pdl": True, "serial": False}[a.combine])
        return 0
    out = _out_dir(a, "check")
    partial = partial_writer(out, a.name)  # what was checked so far, if the run is cut short
    csv = write_table(run_checks(impls=a.impls, on_rows=partial, shard=a.shard), out, a.name)
    partial.path.unlink(missing_ok=True)
    df = pd.read_csv(csv)
    bad = df[df["passed"] != True]  # noqa: E712
    print(df.groupby(["check", "impl"])[["out_rel_norm", "out_elem_ratio", "lse_ratio"]].max().to_string())
    print(f"{len(df) - len(bad)} passed, {len(bad)} failed\ntable: {csv}")
    rc = 1 if len(bad) else 0
    if a.publish:
        rc = max(rc, _publish_or_say(csv))
    return rc


def _cmd_bench(a):
    if rc := _refused_out(a) or _needs_cuda("bench"):
        return rc
    from .bench import fit_batch_model, rows_frame, run_sweep, summary_markdown
    from .report.provenance import write_meta
    csv = _out_dir(a, "bench") / a.name
    write_meta(csv)
    done = []

    def flush(new):  # rewrite after every item: a run cut short keeps what it measured
        done.extend(new)
        rows_frame(done).to_csv(csv, index=False)
    df = rows_frame(run_sweep(a.sweep, progress=not a.no_progress, on_rows=flush))
    write_meta(csv)
    fit = fit_batch_model(df)
    if len(fit):
        fit.to_csv(csv.with_name(csv.stem + ".fit.csv"), index=False)
    print(summary_markdown(df))
    print(f"table: {csv}")
    return _publish_or_say(csv) if a.publish else 0


def _resource_table(df) -> str:
    """The printout of a lab table: one row per config, PREFETCH and the rungs' switches included, then the
    numbers; "-" where a kernel has no such key."""
    import pandas as pd

    from .report.results import parse_config
    df = df.copy()
    if "PREFETCH" not in df.columns:
        df["PREFETCH"] = [parse_config(c).get("PREFETCH") for c in df["config"]]
    front = ["kernel", "arch", "BLOCK_H", "BLOCK_T", "num_warps", "num_stages", "PREFETCH"]
    # the lab puts every config column (switches included) between the config label and status
    head = list(df.columns[:list(df.columns).index("status")]) if "status" in df.columns else []
    switches = [c for c in head if c not in front and c not in ("config", "kernel", "arch")]
    for c in ["PREFETCH", *switches]:
        df[c] = df[c].map(lambda v: "-" if v is None or pd.isna(v) else int(v))  # "-": no such key
    cols = [*front, *switches, "status", "model_shared_bytes", "shared_bytes", "registers", "spill_stores", "mma",
            "ld_global_avg_bytes", "cp_async", "warps_per_sm", "limiter"]
    return df[[c for c in cols if c in df.columns]].to_string(index=False)


def _cmd_resources(a):
    from .lab.resources import sweep_to_csv
    with contextlib.redirect_stdout(io.StringIO()):  # its own printout has no PREFETCH; ours below does
        df = sweep_to_csv(arch=a.arch, kernel=a.kernel, csv=a.csv, progress=not a.no_progress)
    print(_resource_table(df))
    return 0


def _shard(text: str) -> tuple[int, int]:
    """'1/3' -> (1, 3), for check --shard; argparse turns the ValueError into a one-line usage error."""
    from .gpu_check import check_shard
    try:
        i, n = text.split("/")
        return check_shard((int(i), int(n)))
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected I/N with 0 <= I < N, e.g. 0/3; got {text!r}") from e


def gpu_slug(name: str) -> str:
    """'NVIDIA H200' -> 'h200': the GPU part of a published table's name."""
    s = re.sub(r"^nvidia\s+", "", str(name).strip(), flags=re.I)
    return re.sub(r"[^a-z0-9]+", "_", s.lower()).strip("_") or "gpu"


def _provenance_of(csv: Path) -> dict:
    from .report.provenance import meta_path
    meta = meta_path(csv)
    if meta.is_file():
        return json.loads(meta.read_text())
    import pandas as pd
    rows = pd.read_csv(csv, nrows=1)  # correctness rows carry their provenance as columns
    return rows.iloc[0].to_dict() if len(rows) else {}


def _sweep_label(csv: Path) -> str:
    """'_<sweep>' for a bench table of one sweep: sweeps of one run often start in the same minute."""
    import pandas as pd
    cols = pd.read_csv(csv, nrows=0).columns
    if "sweep" not in cols:
        return ""
    sweeps = pd.read_csv(csv, usecols=["sweep"])["sweep"].dropna().unique()
    return f"_{re.sub(r'[^a-z0-9]+', '', str(sweeps[0]).lower())}" if len(sweeps) == 1 else ""


def publish_table(csv, data_dir: Path | None = None) -> list[Path]:
    """Copy a run's table (with its .meta.json and .fit.csv) into data/ as <kind>_<gpu>_<date>.csv.

    Refuses (ValueError) a table of another kind, one in data/ already, one measured without a GPU, and any
    name that exists in data/ already: a published table is never replaced. A different table dated in the same
    minute as one in data/ is named to the second (``..._<date>-HHMMSS.csv``).
    """
    csv, data_dir = Path(csv), Path(data_dir or DATA)
    if not csv.is_file():
        raise ValueError(f"{csv}: no such table")
    if csv.resolve().parent == data_dir.resolve():
        raise ValueError(f"{csv}: is in data/ already; publish a run's table (runs/...)")
    kind = csv.stem.split("_")[0].split(".")[0]
    if kind not in PUBLISHABLE:
        raise ValueError(f"{csv.name}: data/ takes {' and '.join(PUBLISHABLE)} tables (named {kind}*.csv)")
    prov = _provenance_of(csv)
    gpu = str(prov.get("gpu", ""))
    if gpu in ("", "cpu", "n/a", "nan"):
        raise ValueError(f"{csv}: its provenance names no GPU (gpu={gpu!r}); data/ holds GPU measurements")
    try:
        when = dt.datetime.strptime(str(prov["date"]), "%Y-%m-%dT%H:%M:%SZ")
    except (KeyError, ValueError):
        raise ValueError(f"{csv}: its provenance has no date (date={prov.get('date')!r})") from None
    stem = f"{kind}_{gpu_slug(gpu)}_{when:%Y%m%d-%H%M}" + _sweep_label(csv)
    first = data_dir / f"{stem}.csv"
    if first.exists() and first.read_bytes() != csv.read_bytes():
        # another table of the same minute (a check and the pytest table of one GPU call): its seconds tell them
        # apart; the same table again is still refused below
        stem = stem.replace(f"{when:%Y%m%d-%H%M}", f"{when:%Y%m%d-%H%M%S}", 1)
    pairs = [(csv, data_dir / f"{stem}.csv")]
    for suffix in (".meta.json", ".fit.csv"):
        src = csv.with_name(csv.stem + suffix)
        if src.is_file():
            pairs.append((src, data_dir / f"{stem}{suffix}"))
    taken = [str(d) for _, d in pairs if d.exists()]
    if taken:
        raise ValueError(f"already in data/: {', '.join(taken)}; a published table is never replaced")
    data_dir.mkdir(parents=True, exist_ok=True)
    for src, dst in pairs:
        with open(dst, "xb") as f:  # "x": fail rather than replace, even against a concurrent writer
            f.write(src.read_bytes())
    return [d for _, d in pairs]


def _publish_or_say(csv: Path) -> int:
    try:
        written = publish_table(csv)
    except ValueError as e:
        print(f"publish refused: {e}", file=sys.stderr)
        return 1
    print("published: " + ", ".join(str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p) for p in written))
    return 0


def _cmd_publish(a):
    return max((_publish_or_say(Path(t)) for t in a.table), default=0)


def _choices():
    """The CLI's choices, from the modules that own them."""
    from .bench import SWEEPS
    from .lab.resources import KERNELS
    from .lab.targets import TARGETS
    return SWEEPS, (*KERNELS, "all"), (*TARGETS, "all")


def parser() -> argparse.ArgumentParser:
    sweeps, kernels, archs = _choices()
    p = argparse.ArgumentParser(prog="python -m workbench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True, metavar="{check,bench,resources,publish,notebooks}")
    out_help = ("write here instead of a new runs/<date-time>-{}/ folder: a new or empty folder outside data/ and "
                "figures/ (only publishing adds to those)")
    force_help = "with --out: write into a folder that has files already (files of the same names are replaced)"
    publish_help = "also add the table to data/ as a new dated file (never replaces one)"
    c = sub.add_parser("check", help="GPU correctness table (needs CUDA)")
    c.add_argument("--out", help=out_help.format("check"))
    c.add_argument("--force", action="store_true", help=force_help)
    c.add_argument("--name", default="correctness_h200.csv")
    c.add_argument("--publish", action="store_true", help=publish_help)
    from .gpu_check import case_impls, checked_impls
    c.add_argument("--sanitize", choices=checked_impls(), help="run one small case (for compute-sanitizer)")
    c.add_argument("--impls", nargs="+", choices=case_impls(), metavar="IMPL",
                   help="check only these kernels (and 'auto'); default: every kernel and 'auto'")
    from .format.cases import SANITIZER, catalogue, scaled_ids
    c.add_argument("--case", default=SANITIZER, choices=[e.id for e in catalogue()] + scaled_ids(), metavar="CASE_ID",
                   help=f"with --sanitize: the catalogue entry to run, or an entry's GPU version (<id>@<label>, "
                        f"e.g. one of 128 heads) (default {SANITIZER})")
    c.add_argument("--shard", type=_shard, default=None, metavar="I/N",
                   help="check only the I-th of N interleaved parts of the cases (0 <= I < N), so that N processes "
                        "share one kernel's check; the N tables' rows together are the whole table's")
    c.add_argument("--combine", default="rule", choices=("rule", "pdl", "serial"),
                   help="with --sanitize: launch the combine by decode's rule, always as a programmatic "
                        "dependent, or as an ordinary launch")
    c.set_defaults(fn=_cmd_check)
    b = sub.add_parser("bench", help="run a benchmark sweep (needs CUDA)")
    b.add_argument("--sweep", default="smoke", choices=sweeps, metavar="SWEEP",
                   help=f"one of: {', '.join(sweeps)} (default: smoke)")
    b.add_argument("--out", help=out_help.format("bench"))
    b.add_argument("--force", action="store_true", help=force_help)
    b.add_argument("--name", default="bench_h200.csv")
    b.add_argument("--publish", action="store_true", help=publish_help)
    b.add_argument("--no-progress", action="store_true")
    b.set_defaults(fn=_cmd_bench)
    r = sub.add_parser("resources", help="compile configs for a target with no GPU; print (and write) the table",
                       description="Compile every shipped config of a kernel for a target (no GPU needed) and "
                                   "print registers, shared memory, spills, PREFETCH and occupancy. The full "
                                   "sweep of the default (every mma config, sm_120) takes about 5 minutes on 2 "
                                   "CPU cores; --kernel all compiles every registered kernel (246 configs a "
                                   "target: 20-40 minutes each, measured on 2 shared cores), --arch all four "
                                   "targets.")
    r.add_argument("--arch", default="sm_120", choices=archs, help="target (default: sm_120)")
    r.add_argument("--kernel", default="mma", choices=kernels, help="kernel (default: mma)")
    r.add_argument("--csv", default=None, help="also write the table here")
    r.add_argument("--no-progress", action="store_true")
    r.set_defaults(fn=_cmd_resources)
    u = sub.add_parser("publish", help="add a run's table to data/ as a new dated file (never replaces one)")
    u.add_argument("table", nargs="+", help="e.g. runs/<date-time>-bench/bench_h200.csv")
    u.set_defaults(fn=_cmd_publish)
    sub.add_parser("notebooks", help="run every notebook through papermill into runs/<date>/ (see its --help)")
    return p


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["notebooks"]:  # the pipeline owns its flags (-p, -f, --only, ...)
        from .report.pipeline import main as pipeline_main
        return pipeline_main(argv[1:])
    a = parser().parse_args(argv)
    return a.fn(a)


if __name__ == "__main__":
    sys.exit(main())
