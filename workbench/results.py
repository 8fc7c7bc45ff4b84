"""Reading measured tables back: every bench table in ``data/`` (or a run folder) as one frame.

Notebooks and tests read results through here, never with their own ``read_csv`` and regexes:
the config travels as flat columns (``BLOCK_H``, ``BLOCK_T``, ``num_warps``, ``num_stages``,
``PREFETCH``, ...), and each row says whether the kernel sources it timed still match the
checked-out code (``stale``).
"""
from __future__ import annotations

import ast
from pathlib import Path

from .provenance import ROOT, kernel_source_hash, kernels_changed_since

DATA = ROOT / "data"
PEER_PROVIDERS = ("flashmla",)
CONFIG_COLUMNS = ("BLOCK_H", "BLOCK_T", "num_warps", "num_stages", "PREFETCH")


def parse_config(text) -> dict:
    """A config cell as a dict: '' or NaN is no config; old tables hold ``str(dict)``, new ones a label."""
    if text is None or (isinstance(text, float) and text != text) or str(text).strip() == "":
        return {}
    s = str(text).strip()
    if s.startswith("{"):
        return dict(ast.literal_eval(s))
    out = {}
    for part in s.split(","):  # label form: "BLOCK_H=16,BLOCK_T=32,num_warps=4"
        k, _, v = part.partition("=")
        out[k.strip()] = int(v) if v.strip().lstrip("-").isdigit() else v.strip()
    return out


def stale_flags(df):
    """Per row: True when the kernel sources it timed differ from the checkout, None when unknown.

    A row whose ``kernel_hash`` is the current sources' is fresh; otherwise git compares its ``git_commit``'s
    sources with the checkout's (comments and docstrings aside: a hash from before they were stripped, or a
    commit that changed only notes, is not stale), and a row that git cannot place is stale if it has a hash.
    """
    current = kernel_source_hash()
    cache: dict = {}
    flags = []
    for _, r in df.iterrows():
        h = r.get("kernel_hash")
        has_hash = isinstance(h, str) and bool(h)
        if has_hash and h == current:
            flags.append(False)
            continue
        c = str(r.get("git_commit", ""))
        if c not in cache:
            cache[c] = kernels_changed_since(c)
        flags.append(True if cache[c] is None and has_hash else cache[c])
    return flags


def load_bench(paths=None, data_dir: Path | str = DATA):
    """Every bench table (``bench_*.csv`` except fits) concatenated, with flat config columns and ``stale``."""
    import pandas as pd
    if paths is None:
        paths = sorted(p for p in Path(data_dir).glob("bench_*.csv") if not p.name.endswith(".fit.csv"))
    frames = []
    for p in paths:
        f = pd.read_csv(p)
        f["source"] = Path(p).name
        frames.append(f)
    if not frames:
        raise FileNotFoundError(f"no bench_*.csv table in {data_dir}")
    df = pd.concat(frames, ignore_index=True)
    if "kernel" not in df.columns:
        df["kernel"] = df["provider"]
    df["kernel"] = df["kernel"].fillna(df["provider"])
    parsed = [parse_config(c) for c in df.get("config", [""] * len(df))]
    for col in CONFIG_COLUMNS:
        from_cell = [p.get(col) for p in parsed]
        if col in df.columns:
            df[col] = df[col].where(df[col].notna(), pd.Series(from_cell, index=df.index, dtype="object"))
        else:
            df[col] = from_cell
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64")
    df["stale"] = stale_flags(df)
    df.loc[df["provider"].isin(PEER_PROVIDERS), "stale"] = False  # a peer's time does not depend on our code
    return apply_errata(df, Path(data_dir) / ERRATA)


def current_tables(df=None, data_dir: Path | str = DATA):
    """Which bench table is current for each sweep: the newest (by its rows' date) whose rows of registered
    kernels are all fresh (:func:`stale_flags`), else the newest. One row per sweep: sweep, source, date, git_commit, rows, stale
    (True: no fresh table of that sweep exists; measure it again). Notebooks and figures take a sweep's current
    numbers from here (``current_rows``); the other tables are history."""
    import pandas as pd
    df = load_bench(data_dir=data_dir) if df is None else df
    if "sweep" not in df.columns:
        return pd.DataFrame(columns=["sweep", "source", "date", "git_commit", "rows", "stale"])
    from . import registry
    # the rows that can vouch: our kernels that still exist (a peer's rows are never stale; a removed rung's
    # rows, kept as history, always are)
    kernel = df["kernel"] if "kernel" in df.columns else df["provider"]
    ours = df[~df["provider"].isin(PEER_PROVIDERS) & kernel.isin(registry.names())]
    out = []
    for sweep, rows in df.groupby(df["sweep"].fillna("(none)")):
        tables = []
        for source, t in rows.groupby("source"):
            mine = ours[ours.source == source]
            tables.append(dict(sweep=sweep, source=source, date=str(t["date"].max()),
                               git_commit=str(t["git_commit"].iloc[0]), rows=len(t),
                               stale=mine.empty or bool(mine["stale"].fillna(True).astype(bool).any())))
        tables.sort(key=lambda r: (r["date"], r["source"]))
        fresh = [r for r in tables if not r["stale"]]
        out.append((fresh or tables)[-1])
    return pd.DataFrame(out).sort_values("sweep").reset_index(drop=True)


def current_rows(sweep: str, df=None, data_dir: Path | str = DATA):
    """The rows of ``sweep``'s current table (:func:`current_tables`)."""
    df = load_bench(data_dir=data_dir) if df is None else df
    cur = current_tables(df)
    pick = cur[cur.sweep == sweep]
    if pick.empty:
        raise KeyError(f"no bench table of sweep {sweep!r} in data/; sweeps with tables: {sorted(cur.sweep)}")
    return df[df.source == pick.source.iloc[0]]


ERRATA = "errata.csv"  # corrections to published rows; the tables themselves are never rewritten
ERRATA_SELECTORS = ("provider", "batch", "heads", "topk")  # the columns an erratum picks rows by ("*": any)


def apply_errata(df, path: Path):
    """Apply ``data/errata.csv``: each row names a published table (``source``), the rows (provider, batch, heads,
    topk; "*" for any, e.g. a whole table's git_commit), the ``column``, the value ``recorded`` and the
    ``corrected`` one, and why. A corrected row gets the reason in an ``erratum`` column. An erratum that matches
    no row is an error: it would hide a typo."""
    import pandas as pd
    df["erratum"] = ""
    if not path.is_file():
        return df
    loaded = set(df.source)
    for e in pd.read_csv(path, dtype=str).itertuples():
        if e.source not in loaded:
            continue  # a table not loaded (e.g. a run folder read on its own)
        named = [col for col in ERRATA_SELECTORS if getattr(e, col) != "*"]
        missing = [col for col in [e.column, *named] if col not in df.columns]
        if missing:
            raise ValueError(f"{path.name}: {e.source} has no column {missing} (an erratum on a table without "
                             f"provider/batch/heads/topk names its rows with '*')")
        m = (df.source == e.source) & (df[e.column].astype(str) == str(e.recorded))
        for col in named:
            m &= df[col].astype(str) == getattr(e, col)
        if not m.any():
            raise ValueError(f"{path.name}: no row of {e.source} matches {e.provider} b{e.batch} h{e.heads} "
                             f"topk{e.topk} with {e.column}={e.recorded!r}")
        df.loc[m, e.column] = e.corrected
        df.loc[m, "erratum"] = e.reason
    return df


def load_correctness(data_dir: Path | str = DATA, name: str | None = None):
    """One GPU correctness table (``correctness_*.csv``): the newest by default, or the file ``name``.

    Newest means the latest ``date`` in the table (its run time), then the latest file name; the
    old undated ``correctness_h200.csv`` stays readable with ``name="correctness_h200.csv"``. The
    frame gets a ``source`` column (the file name).
    """
    import pandas as pd
    data_dir = Path(data_dir)
    if name is not None:
        path = data_dir / name
    else:
        paths = sorted(p for p in data_dir.glob("correctness_*.csv") if not p.name.endswith(".meta.csv"))
        if not paths:
            raise FileNotFoundError(f"no correctness_*.csv table in {data_dir}")

        def newest(p):
            try:
                dates = pd.read_csv(p, usecols=["date"])["date"].dropna().astype(str)
                date = dates.max() if len(dates) else ""
            except (ValueError, KeyError):
                date = ""
            return (date, p.name)
        path = max(paths, key=newest)
    df = pd.read_csv(path)
    df["source"] = path.name
    return apply_errata(df, data_dir / ERRATA)


# ----------------------------------------------------------------------------- compute-sanitizer logs

SANITIZER_TOOLS = {"sanitizer": "memcheck", "racecheck": "racecheck", "synccheck": "synccheck"}  # file prefix: tool
SANITIZER_META = "sanitizer.meta.json"  # a folder's provenance (scripts/gpu_session.sh writes it)


RUNGS = "rungs.csv"  # every rung the ladder ever registered (kept or removed), and where each can still run


def kernel_names_ever(data_dir: Path | str = DATA) -> tuple[str, ...]:
    """Every kernel name a published row may carry: the registered ones and the removed rungs of ``rungs.csv``."""
    import pandas as pd
    from . import registry
    names = set(registry.names())
    path = Path(data_dir) / RUNGS
    if path.exists():
        names |= set(pd.read_csv(path)["name"].dropna().astype(str))
    return tuple(sorted(names))


def _sanitizer_log_row(path: Path, kernels) -> dict | None:
    """One log's row, or None when its name is not ``<prefix>_<kernel>[_<args>].log`` of a registered kernel."""
    import re
    prefix, _, rest = path.stem.partition("_")
    if prefix not in SANITIZER_TOOLS:
        return None
    kernel = max((k for k in kernels if rest == k or rest.startswith(k + "_")), key=len, default=None)
    if kernel is None:
        return None
    text = path.read_text(errors="replace")
    if SANITIZER_TOOLS[prefix] == "racecheck":
        m = re.search(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, (\d+) warnings?\)", text)
    else:
        m = re.search(r"ERROR SUMMARY: (\d+) errors?", text)
    errors = warnings = None  # no summary (e.g. timed out): unknown, never 0
    if m:
        errors, warnings = int(m.group(1)), int(m.group(2)) if m.re.groups > 1 else 0
    case = re.search(r"sanitizer case \S+ \(([^,]+), combine pdl=(\w+)\)", text)
    passed = re.search(r"passed=(True|False)", text)
    return dict(kernel=kernel, tool=SANITIZER_TOOLS[prefix], args=rest[len(kernel) + 1:], errors=errors,
                warnings=warnings,
                case=case.group(1) if case else "", combine_pdl=case.group(2) if case else "",
                case_passed=(passed.group(1) == "True") if passed else None,
                folder=path.parent.name, log=path.name)


def load_sanitizer(data_dir: Path | str = DATA):
    """Every compute-sanitizer log of ``data/sanitizer_*/`` (``sanitizer_<kernel>.log`` is memcheck's,
    ``racecheck_<kernel>.log`` and ``synccheck_<kernel>.log`` the other tools'; a suffix after the kernel is the
    case's extra arguments, ``args``) as one row each: the tool's error count (racecheck: its reported hazards, as
    errors and warnings; None where the log has no summary, e.g. a timed-out run), the case and whether its output
    passed the check against the reference, the folder and its provenance (``sanitizer.meta.json`` where present)
    and ``stale``. Logs of anything but a registered kernel (the protocol probes) are left out."""
    import json

    import pandas as pd

    kernels = kernel_names_ever(data_dir)
    rows = []
    for folder in sorted(Path(data_dir).glob("sanitizer_*")):
        if not folder.is_dir():
            continue
        meta = json.loads((folder / SANITIZER_META).read_text()) if (folder / SANITIZER_META).exists() else {}
        for log in sorted(folder.glob("*.log")):
            row = _sanitizer_log_row(log, kernels)
            if row is not None:
                rows.append({**row, **{k: meta.get(k) for k in ("git_commit", "kernel_hash", "gpu", "driver",
                                                                 "torch", "triton", "date")}})
    df = pd.DataFrame(rows, columns=["kernel", "tool", "args", "errors", "warnings", "case", "combine_pdl",
                                     "case_passed", "folder", "log", "git_commit", "kernel_hash", "gpu", "driver",
                                     "torch", "triton", "date"])
    df["stale"] = stale_flags(df) if len(df) else []
    return df


def sanitizer_summary(df):
    """Per kernel and tool, the newest folder's log of the default case (no extra arguments, no extra sanitizer
    flags): its folder, error count (racecheck: its reports, each a pair of accesses covering many hazards; NaN:
    the log has no summary), whether the case passed (None: the log does not say) and whether it is stale."""
    plain = df[df["args"] == ""].sort_values("folder", kind="stable")  # folder names are dated
    # whole rows: a newest log without a summary stays NaN (groupby.last would fill it from an older folder)
    return plain.drop_duplicates(["kernel", "tool"], keep="last").sort_values(["kernel", "tool"]).reset_index(
        drop=True)[["kernel", "tool", "folder", "errors", "warnings", "case_passed", "stale"]]
