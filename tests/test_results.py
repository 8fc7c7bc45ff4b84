"""data/ a reader can use: the current table of each sweep in data/, history in data/archive/ (still read), and every
notebook and figure taking its numbers from the current tables only (``results.current_tables``, the one rule).

The decoys here are tables that an older rule would have picked: a newer table that is stale beside an older fresh
one, or an older table that timed more peers than the current one.
"""
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from workbench.report import figures
from workbench.report import results
from workbench.report.provenance import kernel_source_hash

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"


def _row(source, sweep, date, provider, median_us, *, kernel=None, stale=True, batch=64, heads=16, topk=2048,
         extra_topk=0, mode="graph"):
    return dict(source=source, sweep=sweep, date=date, git_commit="abc", provider=provider,
                kernel=kernel or provider, mode=mode, batch=batch, heads=heads, topk=topk, s_q=1,
                extra_topk=extra_topk, config="", median_us=median_us, status="ok",
                stale=False if provider in results.PEER_PROVIDERS else stale)


def _table(source, sweep, date, stale, times, **shape):
    """Rows of one table: provider -> median_us at one shape ("auto" runs wgmma_ws)."""
    return [_row(source, sweep, date, p, us, kernel="wgmma_ws" if p == "auto" else None, stale=stale, **shape)
            for p, us in times.items()]


# ----------------------------------------------------------------------------------------------- the rule
def test_current_rows_takes_a_sweeps_rows_of_a_table_that_holds_several():
    df = pd.DataFrame(_table("first.csv", "batch", "2026-11-30T00:00:00Z", True, {"auto": 1.0, "flashmla": 2.0})
                      + _table("first.csv", "headline", "2026-11-30T00:00:00Z", True, {"auto": 3.0})
                      + _table("h.csv", "headline", "2026-12-01T00:00:00Z", True, {"auto": 4.0}))
    assert set(results.current_rows("batch", df).sweep) == {"batch"}, "not first.csv's headline rows"
    assert results.current_rows("headline", df).source.unique().tolist() == ["h.csv"]
    both = results.current_rows(["batch", "headline", "no_such_sweep"], df)
    assert sorted(zip(both.source, both.sweep)) == [("first.csv", "batch")] * 2 + [("h.csv", "headline")]
    every = results.current_rows(df=df)
    assert every.median_us.tolist() == [1.0, 2.0, 4.0] and results.is_current(df).tolist() == [True, True,
                                                                                                False, True]


def test_same_run_times_never_reads_a_table_the_current_one_superseded():
    """The older headline table timed both peers, the current (newest; both stale) only FlashMLA: the current one
    answers, with no gather time, rather than the fuller history."""
    df = pd.DataFrame(_table("old.csv", "headline", "2026-12-01T00:00:00Z", True,
                             {"auto": 50.0, "flashmla": 80.0, "gather": 30.0})
                      + _table("new.csv", "headline", "2026-12-02T00:00:00Z", True, {"auto": 52.0, "flashmla": 81.0}))
    r = figures.same_run_times(df, batch=64, heads=16, topk=2048)
    assert (r["source"], r["ours_us"], r["flashmla_us"]) == ("new.csv", 52.0, 81.0)
    assert r["gather_us"] != r["gather_us"], "NaN: the current table has no gather floor"


def test_same_run_times_prefers_an_older_fresh_table_to_a_newer_stale_one():
    df = pd.DataFrame(_table("fresh.csv", "headline", "2026-12-01T00:00:00Z", False,
                             {"auto": 50.0, "flashmla": 80.0, "gather": 30.0})
                      + _table("stale.csv", "headline", "2026-12-02T00:00:00Z", True,
                               {"auto": 5000.0, "flashmla": 80.0, "gather": 30.0}))
    assert figures.same_run_times(df, batch=64, heads=16, topk=2048)["source"] == "fresh.csv"


def test_a_shape_the_current_headline_table_lacks_comes_from_another_sweeps_current_table():
    prod = dict(topk=128, extra_topk=512)
    df = pd.DataFrame(_table("h_old.csv", "headline", "2026-12-01T00:00:00Z", True,
                             {"auto": 1.0, "flashmla": 2.0, "gather": 0.5}, **prod)
                      + _table("h_new.csv", "headline", "2026-12-02T00:00:00Z", True,
                               {"auto": 50.0, "flashmla": 80.0, "gather": 30.0})
                      + _table("i_old.csv", "isolate", "2026-12-01T00:00:00Z", True,
                               {"auto": 3.0, "flashmla": 4.0, "gather": 1.0}, **prod)
                      + _table("i_new.csv", "isolate", "2026-12-02T00:00:00Z", True,
                               {"auto": 28.0, "flashmla": 46.0, "gather": 20.0}, **prod))
    r = figures.same_run_times(df, batch=64, heads=16, topk=128, extra_topk=512)
    assert (r["source"], r["ours_us"]) == ("i_new.csv", 28.0)


# ----------------------------------------------------------------------------------------------- the archive
def _bench_csv(path: Path, sweep, date, median_us, kernel_hash="h"):
    rows = _table(path.name, sweep, date, True, {"auto": median_us, "flashmla": 80.0})
    frame = pd.DataFrame(rows).drop(columns=["source", "stale"]).assign(kernel_hash=kernel_hash)
    frame.to_csv(path, index=False)


def test_load_bench_and_the_other_readers_find_archived_files(tmp_path):
    (tmp_path / "archive").mkdir()
    _bench_csv(tmp_path / "bench_x_20261202-0000_headline.csv", "headline", "2026-12-02T00:00:00Z", 52.0)
    _bench_csv(tmp_path / "archive" / "bench_x_20261201-0000_headline.csv", "headline", "2026-12-01T00:00:00Z", 50.0)
    pd.DataFrame([dict(source="bench_x_20261201-0000_headline.csv", provider="auto", batch=64, heads=16, topk=2048,
                       column="kernel", recorded="wgmma_ws", corrected="wgmma_f16", reason="an archived row's erratum")]
                 ).to_csv(tmp_path / "errata.csv", index=False)
    df = results.load_bench(data_dir=tmp_path)
    assert sorted(df.source.unique()) == ["bench_x_20261201-0000_headline.csv", "bench_x_20261202-0000_headline.csv"]
    old = df[df.source == "bench_x_20261201-0000_headline.csv"]
    assert old[old.provider == "auto"].kernel.tolist() == ["wgmma_f16"], "errata reach the archive"
    assert results.current_tables(df).source.tolist() == ["bench_x_20261202-0000_headline.csv"]
    assert results.find_table("bench_x_20261201-0000_headline.csv", tmp_path).parent.name == "archive"
    with pytest.raises(FileNotFoundError):
        results.find_table("bench_x_nope.csv", tmp_path)
    # correctness tables: the newest wherever it lies, an archived one by name; sanitizer folders in the archive
    for folder, name, date in ((tmp_path, "correctness_x_20261202-0000.csv", "2026-12-02T00:00:00Z"),
                               (tmp_path / "archive", "correctness_x_20261201-0000.csv", "2026-12-01T00:00:00Z")):
        pd.DataFrame([dict(impl="mma", check="golden", passed=True, git_commit="abc", date=date)]).to_csv(
            folder / name, index=False)
    assert results.load_correctness(tmp_path).source.iloc[0] == "correctness_x_20261202-0000.csv"
    assert len(results.load_correctness(tmp_path, name="correctness_x_20261201-0000.csv")) == 1
    logs = tmp_path / "archive" / "sanitizer_x_20261201-0000"
    logs.mkdir()
    (logs / "sanitizer_mma.log").write_text("========= ERROR SUMMARY: 0 errors\n")
    assert results.load_sanitizer(tmp_path).folder.tolist() == ["sanitizer_x_20261201-0000"]


def test_archive_moves_what_no_current_result_reads_and_changes_no_row(tmp_path):
    _bench_csv(tmp_path / "bench_x_20261201-0000_headline.csv", "headline", "2026-12-01T00:00:00Z", 50.0)
    raw = (tmp_path / "bench_x_20261201-0000_headline.csv").read_bytes()
    (tmp_path / "bench_x_20261201-0000_headline.meta.json").write_text("{}")
    _bench_csv(tmp_path / "bench_x_20261202-0000_headline.csv", "headline", "2026-12-02T00:00:00Z", 52.0)
    _bench_csv(tmp_path / "bench_x_20261201-0000_ladder.csv", "ladder", "2026-12-01T00:00:00Z", 60.0)
    for name in ("sanitizer_x_20261201-0000", "sanitizer_x_20261202-0000", "sanitizer_x_20261130-0000"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "sanitizer_mma.log").write_text("========= ERROR SUMMARY: 0 errors\n")
    (tmp_path / "sanitizer_x_20261130-0000" / "README.md").write_text("why this run matters")
    before = results.load_bench(data_dir=tmp_path)
    assert [p.name for p in results.superseded(tmp_path)] == [
        "bench_x_20261201-0000_headline.csv", "bench_x_20261201-0000_headline.meta.json", "sanitizer_x_20261201-0000"]
    moved = results.archive_superseded(tmp_path)
    assert len(moved) == 3 and not results.superseded(tmp_path)
    archived = sorted(p.name for p in (tmp_path / "archive").iterdir())
    assert archived == ["bench_x_20261201-0000_headline.csv.gz", "bench_x_20261201-0000_headline.meta.json",
                        "sanitizer_x_20261201-0000"], "the CSV gzipped, the rest as it was"
    assert [results.table_name(tmp_path / "archive" / n) for n in archived] == [p.name for p in moved]
    packed = results.find_table("bench_x_20261201-0000_headline.csv", tmp_path)
    assert packed.name.endswith(".csv.gz") and gzip.decompress(packed.read_bytes()) == raw, "the same bytes inside"
    again = tmp_path / "again"
    (again / "archive").mkdir(parents=True)
    (again / "archive" / "t.csv").write_bytes(raw)
    assert results.gzip_archive(again)[0].read_bytes() == packed.read_bytes(), "no name or time in the gzip"
    after = results.load_bench(data_dir=tmp_path)
    pd.testing.assert_frame_equal(before, after)
    assert results.sanitizer_summary(results.load_sanitizer(tmp_path)).folder.tolist() == ["sanitizer_x_20261202-0000"]


def test_archive_in_a_git_checkout_stages_the_gzip_for_the_csv_from_a_relative_data_dir(tmp_path, monkeypatch):
    """What `python -m workbench.report.results archive --data-dir data` does in a checkout: the superseded CSV
    leaves the index and its gzip enters it (a relative data_dir once sent git to data/data/)."""
    data = tmp_path / "data"
    data.mkdir()
    _bench_csv(data / "bench_x_20261201-0000_headline.csv", "headline", "2026-12-01T00:00:00Z", 50.0)
    _bench_csv(data / "bench_x_20261202-0000_headline.csv", "headline", "2026-12-02T00:00:00Z", 52.0)
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(git + ["init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(git + ["add", "data"], cwd=tmp_path, check=True)
    subprocess.run(git + ["commit", "-q", "-m", "tables"], cwd=tmp_path, check=True)
    monkeypatch.chdir(tmp_path)
    assert [p.name for p in results.archive_superseded("data")] == ["bench_x_20261201-0000_headline.csv"]
    staged = subprocess.run(["git", "status", "--porcelain"], cwd=tmp_path, capture_output=True, text=True,
                            check=True).stdout.splitlines()
    assert sorted(staged) == ["A  data/archive/bench_x_20261201-0000_headline.csv.gz",
                              "D  data/bench_x_20261201-0000_headline.csv"], staged


def test_an_archived_committed_table_still_loads_by_name():
    """A history table (named by data/rungs.csv and data/errata.csv) lies in data/archive/ and loads as itself."""
    path = results.find_table("bench_h200_20261201-1102_ladder.csv")
    assert path.parent == DATA / results.ARCHIVE
    df = results.load_bench([path], data_dir=DATA)
    assert set(df.source) == {"bench_h200_20261201-1102_ladder.csv"} and (df.erratum != "").all()


@pytest.mark.slow
def test_data_readme_lists_the_current_tables_and_they_lie_in_data():
    """data/README.md's list is current_tables() of the committed data (after publishing: `python -m
    workbench.report.results readme`, and `... archive` to move what the new table superseded)."""
    bench = results.load_bench()
    text = (DATA / results.README).read_text()
    assert results.readme_section(bench) in text, (
        "data/README.md's list of current tables is out of date: run .venv/bin/python -m workbench.report.results readme")
    for source in results.current_tables(bench).source:
        assert (DATA / source).is_file(), f"{source} is current: it belongs in data/, not data/archive/"


# ----------------------------------------------------------------------------------------------- notebook 04
@pytest.mark.slow
def test_notebook_04_reads_only_the_current_tables(tmp_path):
    """Notebook 04 on a data folder holding the committed current tables (made fresh) and, newer but stale, a
    headline and an overhead table with every time a hundred times larger: neither decoy reaches a number, a table
    or the list of tables it read. (Editing the kernel sources while it runs stales the copies, and then the decoys
    are rightly current: run it on a quiet checkout.)"""
    data = tmp_path / "data"
    data.mkdir()
    current = results.current_tables()
    fresh = kernel_source_hash()
    for source in current.source.unique():
        pd.read_csv(DATA / source).assign(kernel_hash=fresh).to_csv(data / source, index=False)
    decoys = {"headline": "bench_h200_20990101-0000_headline.csv", "overhead": "bench_h200_20990101-0000_overhead.csv"}
    for sweep, name in decoys.items():
        t = pd.read_csv(DATA / current.set_index("sweep").source[sweep])
        t = t.assign(date="2099-01-01T00:00:00Z", git_commit="0" * 40, kernel_hash="decoy")
        for col in ("median_us", "p20_us", "p80_us"):
            t[col] = t[col] * 100
        t.to_csv(data / name, index=False)
    out = tmp_path / "out"
    executed = tmp_path / "04.ipynb"
    r = subprocess.run([sys.executable, "-m", "papermill", str(ROOT / "notebooks" / "04_throughput.ipynb"),
                        str(executed), "-p", "data_dir", str(data), "-p", "out_dir", str(out), "--no-progress-bar"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    shown = json.dumps([c.get("outputs", []) for c in json.loads(executed.read_text())["cells"]])
    for name in decoys.values():
        assert name not in shown, f"notebook 04 read {name}, a table that is not current"
    head = pd.read_csv(out / "headline_ratios.csv")
    assert not set(head.source) & set(decoys.values())
    from workbench.bench import overhead_table
    genuine = results.load_bench([data / current.set_index("sweep").source["overhead"]], data_dir=data)
    genuine = genuine[genuine.status == "ok"].assign(config=lambda f: f.config.fillna(""))  # as notebook 04 has it
    expected = overhead_table(genuine)
    over = pd.read_csv(out / "host_overhead.csv")
    assert over.overhead_us.tolist() == pytest.approx(expected.overhead_us.tolist(), rel=1e-6), "the decoy's times"


def test_a_later_check_of_other_code_does_not_displace_the_check_of_the_code_here(tmp_path):
    """A correctness table run later on other kernel sources (a rung measured, then removed) is history: the
    table of the checked-out sources stays the one notebooks read."""
    from workbench.report.provenance import kernel_source_hash
    here, other = "correctness_x_20261203-0833.csv", "correctness_x_20261203-1703.csv"
    for name, h, date in ((here, kernel_source_hash(), "2026-12-03T08:33:00Z"),
                          (other, "000000000000", "2026-12-03T17:03:00Z")):
        pd.DataFrame([dict(impl="mma", check="golden", passed=True, git_commit="abc", kernel_hash=h,
                           date=date)]).to_csv(tmp_path / name, index=False)
    assert results.load_correctness(tmp_path).source.iloc[0] == here  # superseded() archives the others
