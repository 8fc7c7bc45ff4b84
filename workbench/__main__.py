"""Command line: ``python -m workbench {check,bench,resources,notebooks} ...``."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _cmd_check(a):
    import pandas as pd

    from .gpu_check import run_checks, sanitizer_case
    if a.sanitize:
        sanitizer_case(a.sanitize)
        return 0
    df = pd.DataFrame(run_checks())
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / a.name, index=False)
    bad = df[df["passed"] != True]  # noqa: E712
    print(df.groupby(["check", "impl"])[["out_rel_norm", "out_elem_ratio", "lse_ratio"]].max().to_string())
    print(f"{len(df) - len(bad)} passed, {len(bad)} failed")
    return 1 if len(bad) else 0


def _cmd_bench(a):
    from .bench import fit_batch_model, rows_frame, run_sweep, summary_markdown
    from .provenance import provenance
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / (Path(a.name).stem + ".meta.json")).write_text(json.dumps(provenance(), indent=1))
    done = []

    def flush(new):  # rewrite after every item: a run cut short keeps what it measured
        done.extend(new)
        rows_frame(done).to_csv(out / a.name, index=False)
    df = rows_frame(run_sweep(a.sweep, progress=not a.no_progress, on_rows=flush))
    (out / (Path(a.name).stem + ".meta.json")).write_text(json.dumps(provenance(), indent=1))
    fit = fit_batch_model(df)
    if len(fit):
        fit.to_csv(out / (Path(a.name).stem + ".fit.csv"), index=False)
    print(summary_markdown(df))
    return 0


def _cmd_resources(a):
    from .resources import sweep_to_csv
    sweep_to_csv(arch=a.arch, kernel=a.kernel, csv=a.csv, progress=not a.no_progress)
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["notebooks"]:  # the pipeline owns its flags (-p, -f, --only, ...)
        from .pipeline import main as pipeline_main
        return pipeline_main(argv[1:])
    p = argparse.ArgumentParser(prog="python -m workbench")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="GPU correctness table")
    c.add_argument("--out", default="data")
    c.add_argument("--name", default="correctness_h200.csv")
    c.add_argument("--sanitize", choices=["mma", "simt"], help="run one small case (for compute-sanitizer)")
    c.set_defaults(fn=_cmd_check)
    b = sub.add_parser("bench", help="run a benchmark sweep on the GPU")
    b.add_argument("--sweep", default="smoke")
    b.add_argument("--out", default="data")
    b.add_argument("--name", default="bench_h200.csv")
    b.add_argument("--no-progress", action="store_true")
    b.set_defaults(fn=_cmd_bench)
    r = sub.add_parser("resources", help="compile configs for a target with no GPU; write a CSV")
    r.add_argument("--arch", default="sm_120", help="sm_120, sm_100, sm_90, sm_89 or 'all'")
    r.add_argument("--kernel", default="mma", help="mma, simt, combine or 'all'")
    r.add_argument("--csv", default=None)
    r.add_argument("--no-progress", action="store_true")
    r.set_defaults(fn=_cmd_resources)
    sub.add_parser("notebooks", help="run every notebook through papermill into runs/<date>/ (see its --help)")
    a = p.parse_args(argv)
    return a.fn(a)


if __name__ == "__main__":
    sys.exit(main())
