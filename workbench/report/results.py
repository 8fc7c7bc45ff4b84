"""Reading measured tables back: every bench table in ``data/`` and ``data/archive/`` (or a run folder) as one frame,
and which of them is current.

Notebooks and tests read results through here, never with their own ``read_csv`` and regexes:
the config travels as flat columns (``BLOCK_H``, ``BLOCK_T``, ``num_warps``, ``num_stages``,
``PREFETCH``, ...), and each row says whether the kernel sources it timed still match the
checked-out code (``stale``). :func:`current_tables` is the one rule for which table of a sweep is current
(:func:`current_rows`, :func:`is_current`); the rest is history, moved to ``data/archive/`` by
``python -m workbench.report.results archive`` and still read from there.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from .provenance import ROOT, kernel_source_hash, kernels_changed_since

DATA = ROOT / "data"
ARCHIVE = "archive"  # data/archive/: the tables and logs no current result reads; history, read like data/ itself
GZ = ".gz"  # an archived CSV is stored gzipped (name.csv.gz) and read by its published name: the history grows by
            # ~3 MB a full set of sweeps, and the device tool sends at most 64 MiB of working tree a call
PEER_PROVIDERS = ("flashmla", "flashmla+sink")  # (the bench's providers.SINK suffix: this module does not import it)
# The GPU data/'s figures and the issues' goals describe. Where a frame holds its rows, the current tables are its
# only: a table another GPU published (an sm_120 owner's, an H100's) is current for that GPU, never over the H200's
REFERENCE_GPU = "NVIDIA H200"
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


def table_folders(data_dir: Path | str = DATA) -> list[Path]:
    """Where a data folder's tables lie: the folder itself and its ``archive/`` (history, kept out of the way)."""
    data_dir = Path(data_dir)
    return [data_dir] + ([data_dir / ARCHIVE] if (data_dir / ARCHIVE).is_dir() else [])


def table_name(path: Path | str) -> str:
    """A published file's name as it was published: an archived CSV lies gzipped (``<name>.gz``) under it."""
    name = Path(path).name
    return name[:-len(GZ)] if name.endswith(".csv" + GZ) else name


def _stored(folder: Path, name: str) -> Path | None:
    """Where the file published as ``name`` lies in ``folder``: as itself or gzipped (an archived CSV); else None."""
    return next((p for p in (folder / name, folder / (name + GZ)) if p.exists()), None)


def find_table(name: str, data_dir: Path | str = DATA) -> Path:
    """The path of a published file by its name, in ``data_dir`` or its ``archive/`` (gzipped there, if a CSV:
    pandas reads either path)."""
    for folder in table_folders(data_dir):
        path = _stored(folder, name)
        if path is not None:
            return path
    raise FileNotFoundError(f"no {name} in {data_dir} or its {ARCHIVE}/")


def data_file(name: str, data_dir: Path | str = DATA) -> Path:
    """``data_dir``'s file ``name``, else the repository's ``data/`` one: for what no GPU measures and so is the
    same for every GPU (the lab's ``resources_<arch>.csv``, compiled on a CPU; the ladder's ``rungs.csv``), which a
    run folder of one GPU's bench tables (an sm_120 owner's, an H100's) does not hold."""
    own = Path(data_dir) / name
    return own if own.is_file() else DATA / name


def _tables(data_dir, pattern: str) -> list[Path]:
    """The files matching ``pattern`` in ``data_dir`` and its archive (a CSV there gzipped), by published name (where
    one lies does not matter)."""
    found = (p for folder in table_folders(data_dir) for pat in (pattern, pattern + GZ) for p in folder.glob(pat))
    return sorted(found, key=table_name)


def load_bench(paths=None, data_dir: Path | str = DATA):
    """Every bench table (``bench_*.csv`` except fits) of ``data_dir`` and its ``archive/`` concatenated, with flat
    config columns and ``stale``; ``source`` is the file's name wherever it lies."""
    import pandas as pd
    if paths is None:
        paths = [p for p in _tables(data_dir, "bench_*.csv") if not table_name(p).endswith(".fit.csv")]
    frames = []
    for p in paths:
        f = pd.read_csv(p)
        f["source"] = table_name(p)
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


def _sweep_of(df):
    import pandas as pd
    return df["sweep"].fillna("(none)") if "sweep" in df.columns else pd.Series("(none)", index=df.index)


def _gpu_of(df):
    """Per row, the GPU that measured it; a row that names none is from an early H200 table."""
    import pandas as pd
    gpu = df["gpu"] if "gpu" in df.columns else pd.Series(None, index=df.index, dtype="object")
    return gpu.fillna(REFERENCE_GPU).astype(str)


def _chosen_gpu(gpu, present) -> str:
    """The GPU whose tables compete, of the GPUs ``present`` in what is read: ``gpu`` where present; the only GPU
    present where ``gpu`` is the default :data:`REFERENCE_GPU` (a run folder of an sm_120 owner reads as it is);
    else a ValueError naming the GPUs present: tables of two GPUs never compete."""
    present = set(present)
    if gpu in present:
        return gpu
    if gpu == REFERENCE_GPU and len(present) == 1:
        return next(iter(present))
    raise ValueError(f"no rows of GPU {gpu!r} here; the GPUs with rows: {sorted(present)} (name one with gpu=, "
                     "or gpu=None for each GPU's current tables)")


def _table_gpus(path: Path) -> set:
    """The GPUs a table's rows name, read from its gpu column alone (:func:`_gpu_of`: a table that names none is
    the H200's; read with no column, pandas would give it no rows)."""
    import pandas as pd
    head = pd.read_csv(path, nrows=0).columns
    return set(_gpu_of(pd.read_csv(path, usecols=["gpu"]) if "gpu" in head else pd.DataFrame(index=[0])))


def bench_gpus(data_dir: Path | str = DATA) -> list[str]:
    """The GPUs that measured the bench tables of ``data_dir`` (and its archive)."""
    return sorted(set().union(*(_table_gpus(p) for p in _tables(data_dir, "bench_*.csv")
                                if not table_name(p).endswith(".fit.csv"))))


def pick_gpu(df, gpu=REFERENCE_GPU):
    """The rows of ``df`` whose tables may be current: those of :func:`_chosen_gpu` (by default
    :data:`REFERENCE_GPU`, the H200 of data/). ``gpu=None``: all rows, each GPU with its own current tables
    (:func:`current_tables`)."""
    if gpu is None or not len(df):
        return df
    on = _gpu_of(df)
    return df[on == _chosen_gpu(gpu, on.unique())]


def current_tables(df=None, data_dir: Path | str = DATA, gpu=REFERENCE_GPU):
    """Which bench table is current for each sweep: the newest (by its rows' date) whose rows of registered
    kernels are all fresh (:func:`stale_flags`), else the newest. One row per sweep: sweep, gpu, source, date,
    git_commit, rows, stale (True: no fresh table of that sweep exists; measure it again). This is the one rule:
    notebooks and figures take a sweep's current numbers through it (``current_rows``, ``is_current``); the other
    tables are history (notebook 05's ladder reads them).

    Tables of one GPU only (:func:`pick_gpu`): ``gpu`` (the H200 by default) where the frame has its rows, so a
    table published from another GPU never becomes the H200's figures' table. ``gpu=None``: one row per GPU and
    sweep (what ``archive`` keeps and data/README.md lists)."""
    import pandas as pd
    df = load_bench(data_dir=data_dir) if df is None else df
    if not len(df):
        return pd.DataFrame(columns=["sweep", "gpu", "source", "date", "git_commit", "rows", "stale"])
    df = pick_gpu(df, gpu)
    from .. import registry
    # the rows that can vouch: our kernels that still exist (a peer's rows are never stale; a removed rung's
    # rows, kept as history, always are)
    kernel = df["kernel"] if "kernel" in df.columns else df["provider"]
    ours = df[~df["provider"].isin(PEER_PROVIDERS) & kernel.isin(registry.names())]
    out = []
    # one GPU's tables compete (pick_gpu), or with gpu=None each GPU's among themselves
    keys = [_sweep_of(df)] if gpu is not None else [_sweep_of(df), _gpu_of(df)]
    for key, rows in df.groupby(keys):
        sweep = key[0]
        tables = []
        for source, t in rows.groupby("source"):
            mine = ours[(ours.source == source) & (_sweep_of(ours) == sweep)]
            tables.append(dict(sweep=sweep, gpu=_gpu_of(t).iloc[0], source=source, date=str(t["date"].max()),
                               git_commit=str(t["git_commit"].iloc[0]), rows=len(t),
                               stale=mine.empty or bool(mine["stale"].fillna(True).astype(bool).any())))
        tables.sort(key=lambda r: (r["date"], r["source"]))
        fresh = [r for r in tables if not r["stale"]]
        out.append((fresh or tables)[-1])
    return pd.DataFrame(out).sort_values(["sweep", "gpu"]).reset_index(drop=True)


def _in_tables(df, cur):
    """Per row of ``df``: True when its (sweep, source) is one of ``cur``'s (a :func:`current_tables` frame)."""
    import pandas as pd
    if not len(df):
        return pd.Series(False, index=df.index, dtype=bool)
    return pd.Series(list(zip(_sweep_of(df), df["source"])), index=df.index).isin(set(zip(cur.sweep, cur.source)))


def is_current(df, gpu=REFERENCE_GPU):
    """Per row of ``df`` (bench rows, whole tables): True when it belongs to its sweep's current table
    (:func:`current_tables` of ``df`` and ``gpu``)."""
    return _in_tables(df, current_tables(df, gpu=gpu))


def current_rows(sweep=None, df=None, data_dir: Path | str = DATA, gpu=REFERENCE_GPU):
    """The rows of the current table (:func:`current_tables`, of ``gpu``) of ``sweep`` (a name), of each of several
    sweeps (a list: those that have a table), or of every sweep (None). Only that sweep's rows of a table that holds
    several. A single sweep with no table of that GPU is a KeyError."""
    df = load_bench(data_dir=data_dir) if df is None else df
    cur = current_tables(df, gpu=gpu)
    keep = _in_tables(df, cur)
    if sweep is None:
        return df[keep]
    names = [sweep] if isinstance(sweep, str) else list(sweep)
    if isinstance(sweep, str) and sweep not in set(cur.sweep):
        raise KeyError(f"no bench table of sweep {sweep!r} of this GPU ({gpu}); sweeps with tables: "
                       f"{sorted(set(cur.sweep))}")
    return df[keep & _sweep_of(df).isin(names)]


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


def load_correctness(data_dir: Path | str = DATA, name: str | None = None, gpu=REFERENCE_GPU):
    """One GPU correctness table (``correctness_*.csv``, in ``data_dir`` or its ``archive/``): the newest of
    ``gpu``'s by default (:func:`_chosen_gpu`: the H200's, or the only GPU's; ``gpu=None``: of any), or the file
    ``name``.

    Newest means, among the tables whose rows all checked the checked-out kernel sources (:func:`stale_flags`;
    any table where none is fresh), the latest ``date`` in the table (its run time), then the latest file name: a
    later check of a since-removed rung does not displace the check of the code at HEAD. The old undated
    ``correctness_h200.csv`` stays readable with ``name="correctness_h200.csv"``. The frame gets a ``source``
    column (the file name).
    """
    import pandas as pd
    data_dir = Path(data_dir)
    if name is not None:
        path = find_table(name, data_dir)
    else:
        paths = [p for p in _tables(data_dir, "correctness_*.csv") if not table_name(p).endswith(".meta.csv")]
        if not paths:
            raise FileNotFoundError(f"no correctness_*.csv table in {data_dir}")

        def newest(p):
            try:
                dates = pd.read_csv(p, usecols=["date"])["date"].dropna().astype(str)
                date = dates.max() if len(dates) else ""
            except (ValueError, KeyError):
                date = ""
            return (date, table_name(p))

        def fresh(p):
            head = pd.read_csv(p, nrows=0).columns
            cols = [c for c in ("kernel_hash", "git_commit") if c in head]
            runs = pd.read_csv(p, usecols=cols).drop_duplicates() if cols else pd.DataFrame()
            return len(runs) > 0 and not any(f is not False for f in stale_flags(runs))
        if gpu is not None:
            on = {p: _table_gpus(p) for p in paths}
            chosen = _chosen_gpu(gpu, set().union(*on.values()))
            paths = [p for p in paths if chosen in on[p]]
        checked_here = [p for p in paths if fresh(p)]
        path = max(checked_here or paths, key=newest)
    df = pd.read_csv(path)
    df["source"] = table_name(path)
    return apply_errata(df, data_dir / ERRATA)


# ----------------------------------------------------------------------------- compute-sanitizer logs

SANITIZER_TOOLS = {"sanitizer": "memcheck", "racecheck": "racecheck", "synccheck": "synccheck"}  # file prefix: tool
SANITIZER_META = "sanitizer.meta.json"  # a folder's provenance (scripts/gpu_session.sh writes it)


RUNGS = "rungs.csv"  # every rung the ladder ever registered (kept or removed), and where each can still run


def kernel_names_ever(data_dir: Path | str = DATA) -> tuple[str, ...]:
    """Every kernel name a published row may carry: the registered ones and the removed rungs of ``rungs.csv``."""
    import pandas as pd
    from .. import registry
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
    """Every compute-sanitizer log of ``data/sanitizer_*/`` and ``data/archive/sanitizer_*/``
    (``sanitizer_<kernel>.log`` is memcheck's, ``racecheck_<kernel>.log`` and ``synccheck_<kernel>.log`` the other
    tools'; a suffix after the kernel is the case's extra arguments, ``args``) as one row each: the tool's error count (racecheck: its reported hazards, as
    errors and warnings; None where the log has no summary, e.g. a timed-out run), the case and whether its output
    passed the check against the reference, the folder and its provenance (``sanitizer.meta.json`` where present)
    and ``stale``. Logs of anything but a registered kernel (the protocol probes) are left out."""
    import json

    import pandas as pd

    kernels = kernel_names_ever(data_dir)
    rows = []
    for folder in _tables(data_dir, "sanitizer_*"):
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


def folder_date(name: str) -> str:
    """The ``YYYYMMDD-HHMM`` (or ``-HHMMSS``, as publish names a second table of the same minute) that ends a dated
    folder's name (``sanitizer_h200_20261205-0431``), "" for none. As text the two forms order by time."""
    m = re.search(r"(\d{8}-\d{4}(?:\d{2})?)$", str(name))
    return m.group(1) if m else ""


def folder_key(name: str) -> tuple:
    """How dated folders of any GPU sort by time: their date (:func:`folder_date`), then the name."""
    return folder_date(name), str(name)


def sanitizer_summary(df):
    """Per kernel and tool, the newest folder's log of the default case (no extra arguments, no extra sanitizer
    flags), whatever GPU ran it (a memory error is the code's, not the card's; each folder's meta names its GPU):
    its folder, error count (racecheck: its reports, each a pair of accesses covering many hazards; NaN:
    the log has no summary), whether the case passed (None: the log does not say) and whether it is stale."""
    # newest by the date that ends each folder's name (folder_key): by the whole name, every H200 folder sorted
    # after every H100 one ("h1" < "h2"), whatever their dates
    plain = df[df["args"] == ""].sort_values("folder", key=lambda f: f.map(folder_key), kind="stable")
    # whole rows: a newest log without a summary stays NaN (groupby.last would fill it from an older folder)
    return plain.drop_duplicates(["kernel", "tool"], keep="last").sort_values(["kernel", "tool"]).reset_index(
        drop=True)[["kernel", "tool", "folder", "errors", "warnings", "case_passed", "stale"]]


# ----------------------------------------------------------------------------- what data/ holds

README = "README.md"
README_BEGIN = "<!-- current tables: written by `python -m workbench.report.results readme`; do not edit by hand -->"
README_END = "<!-- end of current tables -->"


def _companions(table: Path) -> list[Path]:
    """A table and the files published beside it (``.meta.json``, ``.fit.csv``)."""
    return [p for p in (table, table.with_name(table.stem + ".meta.json"), table.with_name(table.stem + ".fit.csv"))
            if p.exists()]


def superseded(data_dir: Path | str = DATA, bench=None) -> list[Path]:
    """What in ``data_dir`` itself (not its archive) no current result reads, to move to ``archive/``: the bench
    tables that are no sweep's current table on any GPU (:func:`current_tables`) with their ``.meta.json`` and
    ``.fit.csv``, the correctness tables but each GPU's one :func:`load_correctness` reads, and the sanitizer
    folders none of whose logs :func:`sanitizer_summary` reads, unless a README.md explains something in them (loose logs beside the folders
    too). ``bench``: :func:`load_bench`'s frame, when the caller has it."""
    data_dir = Path(data_dir)
    bench = load_bench(data_dir=data_dir) if bench is None else bench
    current = set(current_tables(bench, gpu=None).source)  # each GPU's current tables stay
    out = []
    for p in sorted(data_dir.glob("bench_*.csv")):
        if not p.name.endswith(".fit.csv") and p.name not in current:
            out += _companions(p)
    correctness = [p for p in data_dir.glob("correctness_*.csv") if not p.name.endswith(".meta.csv")]
    if correctness:
        gpus = set().union(*(_table_gpus(p) for p in correctness))
        keep = {load_correctness(data_dir, gpu=g).source.iloc[0] for g in gpus}  # each GPU's newest
        out += [q for p in sorted(correctness) if p.name not in keep for q in _companions(p)]
    read = set(sanitizer_summary(load_sanitizer(data_dir)).folder)
    out += [p for p in sorted(data_dir.glob("sanitizer_*"))
            if (p.is_dir() and p.name not in read and not (p / README).exists()) or p.suffix == ".log"]
    return out


def archive_superseded(data_dir: Path | str = DATA, dry_run: bool = False) -> list[Path]:
    """Move :func:`superseded` files into ``data_dir/archive/`` (``git mv`` where git tracks them), where
    :func:`load_bench`, :func:`load_correctness` and :func:`load_sanitizer` still read them; then gzip every plain
    CSV in the archive (:func:`gzip_archive`). Returns what moved."""
    import subprocess
    data_dir = Path(data_dir).resolve()  # git runs in data_dir: a relative path would be taken from there
    moving = superseded(data_dir)
    if dry_run:
        return moving
    (data_dir / ARCHIVE).mkdir(exist_ok=True)
    for p in moving:
        dest = data_dir / ARCHIVE / p.name
        if _stored(dest.parent, p.name) is not None:
            raise FileExistsError(f"{dest} exists already: an archived file is never replaced")
        if _tracked(p):
            subprocess.run(["git", "mv", str(p), str(dest)], cwd=data_dir, check=True)
        else:
            p.rename(dest)
    gzip_archive(data_dir)
    return moving


def _tracked(path: Path) -> bool:
    import subprocess
    return subprocess.run(["git", "ls-files", "--error-unmatch", path.name], cwd=path.parent,
                          capture_output=True).returncode == 0


def gzip_archive(data_dir: Path | str = DATA) -> list[Path]:
    """Replace each plain ``.csv`` in ``data_dir/archive/`` by ``<name>.csv.gz`` with the same bytes inside (a
    reproducible gzip: no name, no time), staged in git where the CSV was tracked. Returns the new files."""
    import gzip
    import subprocess
    folder = Path(data_dir).resolve() / ARCHIVE
    made = []
    for p in sorted(folder.glob("*.csv")) if folder.is_dir() else []:
        dest = p.with_name(p.name + GZ)
        if dest.exists():
            raise FileExistsError(f"{dest} exists already: an archived file is never replaced")
        raw = p.read_bytes()
        with open(dest, "wb") as f, gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0, compresslevel=9) as z:
            z.write(raw)
        if gzip.decompress(dest.read_bytes()) != raw:
            raise OSError(f"{dest}: its contents differ from {p.name}'s; {p.name} kept")
        if _tracked(p):  # the gzip staged before the CSV leaves the index, so a failed add loses nothing
            subprocess.run(["git", "add", dest.name], cwd=folder, check=True)
            subprocess.run(["git", "rm", "-q", "--cached", p.name], cwd=folder, check=True)
        p.unlink()
        made.append(dest)
    return made


def readme_section(bench=None, data_dir: Path | str = DATA) -> str:
    """data/README.md's list of the current tables, between its markers, from :func:`current_tables`."""
    cur = current_tables(load_bench(data_dir=data_dir) if bench is None else bench, gpu=None)
    lines = [README_BEGIN, "", "| sweep | GPU | current table | measured | commit | rows |", "|---|---|---|---|---|---|"]
    for r in cur.itertuples():
        lines.append(f"| {r.sweep} | {r.gpu} | `{r.source}` | {str(r.date)[:16].replace('T', ' ')} "
                     f"| {str(r.git_commit)[:7]} | {r.rows} |")
    return "\n".join(lines + ["", README_END])


def write_readme(data_dir: Path | str = DATA, bench=None) -> Path:
    """Rewrite the generated part of ``data_dir/README.md`` (between its markers) from :func:`readme_section`."""
    path = Path(data_dir) / README
    text = path.read_text()
    if README_BEGIN not in text or README_END not in text:
        raise ValueError(f"{path} has no generated section (the markers {README_BEGIN!r} ... {README_END!r})")
    head, rest = text.split(README_BEGIN, 1)
    tail = rest.split(README_END, 1)[1]
    path.write_text(head + readme_section(bench, data_dir) + tail)
    return path


def _main(argv=None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m workbench.report.results",
                                description="data/: list its current tables, move what is superseded to archive/")
    p.add_argument("what", choices=["current", "archive", "readme"],
                   help="current: print current_tables(); archive: move superseded files to data/archive/ (git mv) "
                        "and gzip its CSVs; readme: rewrite data/README.md's list of current tables")
    p.add_argument("--data-dir", default=str(DATA))
    p.add_argument("--dry-run", action="store_true", help="archive: only print what would move")
    a = p.parse_args(argv)
    if a.what == "current":
        print(current_tables(data_dir=a.data_dir, gpu=None).to_string())
    elif a.what == "archive":
        for path in archive_superseded(a.data_dir, dry_run=a.dry_run):
            print(("would move " if a.dry_run else "moved ") + path.name)
    else:
        print(f"wrote {write_readme(a.data_dir)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
