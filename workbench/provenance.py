"""Provenance for every measured row: GPU, driver, CUDA, torch, triton, git commit, date."""
from __future__ import annotations

import datetime as _dt
import os
import subprocess
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[1]


def git_commit() -> str:
    """The commit being measured; $WORKBENCH_COMMIT wins (the GPU machine gets a tree without .git)."""
    env = os.environ.get("WORKBENCH_COMMIT")
    if env:
        return env
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "workbench"], cwd=ROOT, capture_output=True,
                               text=True).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _smi(field: str) -> str:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "n/a"
    except (OSError, subprocess.TimeoutExpired):
        return "n/a"


def provenance() -> dict:
    """One flat dict; every data row carries these columns."""
    p = dict(date=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), git_commit=git_commit(),
             kernel_hash=kernel_source_hash(),
             torch=torch.__version__, triton=triton.__version__, cuda=torch.version.cuda or "none")
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        p.update(gpu=props.name, sm_count=props.multi_processor_count,
                 capability=f"sm_{props.major}{props.minor}", driver=_smi("driver_version"),
                 sm_clock_mhz=_smi("clocks.sm"), mem_clock_mhz=_smi("clocks.mem"),
                 max_sm_clock_mhz=_smi("clocks.max.sm"))
    else:
        p.update(gpu="cpu", sm_count=0, capability="none", driver="none", sm_clock_mhz="n/a", mem_clock_mhz="n/a",
                 max_sm_clock_mhz="n/a")
    return p


def meta_path(csv) -> Path:
    """Where a table's provenance is kept beside it: ``<table>.meta.json``."""
    csv = Path(csv)
    return csv.with_name(csv.stem + ".meta.json")


def write_meta(csv, prov: dict | None = None) -> Path:
    """Write ``prov`` (default: :func:`provenance` now) as the table's ``.meta.json``; returns its path."""
    import json
    path = meta_path(csv)
    path.write_text(json.dumps(provenance() if prov is None else prov, indent=1))
    return path


KERNEL_SOURCES = ("workbench/kernels",)  # what a timing row describes: the jit code and its launchers


def kernel_source_hash(root: Path = ROOT) -> str:
    """12 hex digits over the kernel sources' bytes, so a row can say which code it timed without git."""
    import hashlib
    h = hashlib.sha256()
    for top in KERNEL_SOURCES:
        for p in sorted((root / top).rglob("*.py")):
            h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def kernels_changed_since(commit: str, root: Path = ROOT) -> bool | None:
    """True when the checked-out kernel sources differ from ``commit``'s; None when git cannot tell."""
    sha = str(commit).split("+")[0]
    if not sha or sha in ("unknown", "nan"):
        return None
    try:
        r = subprocess.run(["git", "diff", "--quiet", sha, "--", *KERNEL_SOURCES], cwd=root, capture_output=True,
                           timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return {0: False, 1: True}.get(r.returncode)
