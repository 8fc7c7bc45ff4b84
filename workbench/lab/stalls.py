"""Warp-stall samples of a warp-specialised kernel, by partition, from Nsight Compute's per-instruction table.

``ncu --page source --print-source sass --csv`` (what ``scripts/gpu_session.sh`` writes with ``NCU_SOURCE=1``) gives
each SASS instruction its stall samples, but not the partition it belongs to. In the SASS of a Gluon
``gl.warp_specialize`` kernel on sm_90 each partition's code starts with the ``setmaxnreg`` that gives it its
register share (``USETMAXREG ... 0x70``: 112 registers), so the share names the code from one ``USETMAXREG`` to
the next (a rerun's copy of a partition has the same share). Two shares are not a partition's loop: the one every
warp starts with (the kernel's register cap, e.g. 120 for wgmma_ws_h64: the dispatch prologue) and the default
partition's outside ``warp_specialize`` (e.g. 256: the checks between passes and the epilogue). After the kernel's
last ``EXIT`` lie the retry stubs of mbarrier waits (``SYNCS.PHASECHK`` and a branch back, sometimes after a few
instructions that rebuild the barrier's address), each ended by a branch back to its caller: a stub's samples go
to the share of the code it returns to, and they, and the branches into the stub, count as waiting.

    python -m workbench.lab.stalls data/ncu/source/<commit>_ncu_source_<kernel>_h<heads>.csv.gz [--names 112=producer ...]
"""
from __future__ import annotations

import argparse
import csv
import gzip
import io
import re
from collections import Counter

import pandas as pd

SAMPLES = "Warp Stall Sampling (All Samples)"
_SETMAXNREG = re.compile(r"USETMAXREG\.\S+\s+(?:\S+,\s*)?(0x[0-9a-f]+)")
_BRANCH = re.compile(r"^\s*(?:@!?U?P\w+\s+)?BRA\s+(0x[0-9a-f]+)")


def read_source_csv(path, kernel: str | None = None) -> pd.DataFrame:
    """The per-instruction table of one kernel; numeric columns as numbers, 0 where blank.

    Each kernel's table starts with a line that names it (``"Kernel Name","<name>",``): a profile with
    ``NCU_COMBINE=1`` holds the partial's and then the combine's. ``kernel``: the table of the first kernel whose
    name contains it (None: the first table; a kernel profiled twice: its second table is "<name> #2"); a ValueError
    names the tables there are when none matches."""
    with (gzip.open(path, "rt") if str(path).endswith(".gz") else open(path)) as f:
        lines = f.readlines()
    starts = [i for i, line in enumerate(lines) if line.startswith('"Kernel Name",')]
    if not starts:
        raise ValueError(f"{path}: no \"Kernel Name\" line; not an ncu --page source --csv table")
    tables, seen = {}, Counter()
    for a, b in zip(starts, starts[1:] + [len(lines)]):
        name = next(csv.reader([lines[a]]))[1]  # quoted: a template name's commas stay in it
        seen[name] += 1
        tables[name if seen[name] == 1 else f"{name} #{seen[name]}"] = "".join(lines[a + 1:b])
    chosen = next((n for n in tables if kernel is None or kernel in n), None)
    if chosen is None:
        raise ValueError(f"kernel: no table of a kernel named like {kernel!r} in {path}; it holds {sorted(tables)}")
    df = pd.read_csv(io.StringIO(tables[chosen]))
    for col in df.columns:
        if col not in ("Address", "Source", "Address Space", "Access Operation"):
            df[col] = pd.to_numeric(df[col], errors="coerce").fillna(0)
    df["address"] = df["Address"].map(lambda a: int(str(a), 16))
    return df


def _stubs(df: pd.DataFrame) -> list[tuple[int, int, int | None]]:
    """(first row, last row, return address) of each block after the kernel's last EXIT, a block ending at an
    unconditional branch (the return to the caller); None where a block has no such branch."""
    src = df["Source"].tolist()
    exits = [i for i, line in enumerate(src) if re.match(r"^\s*EXIT\b", line)]
    if not exits:
        return []
    blocks, first = [], exits[-1] + 1
    for i in range(first, len(src)):
        m = _BRANCH.match(src[i])
        if m and not src[i].lstrip().startswith("@"):
            blocks.append((first, i, int(m.group(1), 16)))
            first = i + 1
    if first < len(src):
        blocks.append((first, len(src) - 1, None))
    return blocks


def partition_of_each_instruction(df: pd.DataFrame) -> pd.Series:
    """The register share (an int, from the last ``USETMAXREG`` above it) of each instruction's partition; 0 before
    the first. The retry stubs after the last EXIT take the share of the code they return to."""
    regs, current = [], 0
    for src in df["Source"]:
        m = _SETMAXNREG.search(src)
        if m:
            current = int(m.group(1), 16)
        regs.append(current)
    regs = pd.Series(regs, index=df.index)
    at = dict(zip(df["address"], regs))
    for first, last, ret in _stubs(df):
        if ret is not None and ret in at:
            regs.iloc[first:last + 1] = at[ret]
    return regs


def is_wait(df: pd.DataFrame) -> pd.Series:
    """Instructions that spin on an mbarrier: every try-wait, every instruction of a stub that holds one, and every
    branch into such a stub (a branch's samples there are long-scoreboard stalls on the try-wait's result)."""
    wait = df["Source"].str.contains("SYNCS.PHASECHK", regex=False)
    into = set()
    for first, last, _ in _stubs(df):
        if wait.iloc[first:last + 1].any():
            wait.iloc[first:last + 1] = True
            into |= set(df["address"].iloc[first:last + 1])

    def branches_into(src: str) -> bool:  # a conditional branch: the try-wait above it failed
        m = _BRANCH.match(src)
        return bool(m) and src.lstrip().startswith("@") and int(m.group(1), 16) in into
    return wait | df["Source"].map(branches_into)


def partition_stalls(df: pd.DataFrame, names: dict[int, str] | None = None) -> pd.DataFrame:
    """One row per register share: its stall samples, their share of the kernel's, and how many of them are
    mbarrier waits. ``names`` maps a share (registers) to a partition's name; other shares keep their number."""
    regs = partition_of_each_instruction(df)
    wait = is_wait(df)
    rows = []
    for share, idx in regs.groupby(regs).groups.items():
        samples = df.loc[idx, SAMPLES].sum()
        waiting = df.loc[idx][wait.loc[idx]][SAMPLES].sum()
        rows.append(dict(partition=(names or {}).get(share, f"{share} registers"), registers=share,
                         samples=int(samples), share=samples / max(df[SAMPLES].sum(), 1),
                         mbarrier_wait_samples=int(waiting), waiting=waiting / max(samples, 1)))
    return pd.DataFrame(rows).sort_values("samples", ascending=False, ignore_index=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m workbench.lab.stalls", description=__doc__.split("\n\n")[0])
    p.add_argument("csv", help="ncu --page source --print-source sass --csv output (.csv or .csv.gz)")
    p.add_argument("--kernel", default=None,
                   help="the table of the first kernel whose name contains this (default: the file's first table)")
    p.add_argument("--names", nargs="*", default=[], metavar="REGS=NAME",
                   help="name a partition by its register share, e.g. 112=producer 160=pv 232=softmax")
    a = p.parse_args(argv)
    names = {}
    for item in a.names:
        regs, _, name = item.partition("=")
        if not regs.isdigit() or not name:
            p.error(f"--names: expected REGS=NAME, e.g. 112=producer; got {item!r}")
        names[int(regs)] = name
    table = partition_stalls(read_source_csv(a.csv, a.kernel), names)
    print(table.to_string(index=False, formatters={"share": "{:.1%}".format, "waiting": "{:.0%}".format}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
