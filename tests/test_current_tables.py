"""One place says which bench table is current for each sweep."""
import pandas as pd
import pytest

from workbench.report import results


def _rows(source, sweep, date, stale, provider="auto", kernel="wgmma_ws"):
    return [dict(source=source, sweep=sweep, date=date, git_commit="abc", provider=provider, kernel=kernel,
                 stale=stale),
            dict(source=source, sweep=sweep, date=date, git_commit="abc", provider="flashmla", kernel="flashmla",
                 stale=False)]


def test_the_newest_fresh_table_wins_else_the_newest():
    df = pd.DataFrame(_rows("h_old.csv", "headline", "2026-12-01T10:00:00Z", False)
                      + _rows("h_new.csv", "headline", "2026-12-02T10:00:00Z", True)
                      + _rows("l_old.csv", "ladder", "2026-12-01T10:00:00Z", True)
                      + _rows("l_new.csv", "ladder", "2026-12-02T10:00:00Z", True))
    cur = results.current_tables(df).set_index("sweep")
    assert cur.loc["headline", "source"] == "h_old.csv" and not cur.loc["headline", "stale"]
    assert cur.loc["ladder", "source"] == "l_new.csv" and cur.loc["ladder", "stale"], "no fresh one: the newest"
    assert set(results.current_rows("headline", df).source) == {"h_old.csv"}
    with pytest.raises(KeyError, match="crossover"):
        results.current_rows("crossover", df)


def test_a_peer_alone_does_not_make_a_table_fresh():
    df = pd.DataFrame(_rows("a.csv", "headline", "2026-12-01T10:00:00Z", True)
                      + _rows("b.csv", "headline", "2026-12-02T10:00:00Z", None))
    assert results.current_tables(df).source.tolist() == ["b.csv"]  # unknown counts as stale: the newest
    assert bool(results.current_tables(df).stale.iloc[0])


def test_the_committed_data_names_a_current_table_for_the_headline_and_the_ladder():
    cur = results.current_tables()
    assert {"headline", "ladder", "overhead"} <= set(cur.sweep)


def test_a_removed_rungs_rows_are_history_and_do_not_stale_their_table():
    df = pd.DataFrame(_rows("l.csv", "ladder", "2026-12-01T10:00:00Z", False)
                      + _rows("l.csv", "ladder", "2026-12-01T10:00:00Z", True, provider="wgmma_rope",
                              kernel="wgmma_rope"))
    assert not results.current_tables(df).stale.iloc[0]
    only_removed = pd.DataFrame(_rows("r.csv", "ladder", "2026-12-01T10:00:00Z", False, provider="wgmma_rope",
                                      kernel="wgmma_rope"))
    assert results.current_tables(only_removed).stale.iloc[0], "nothing that exists vouches for it"


def _on(rows, gpu):
    return [dict(r, gpu=gpu) for r in rows]


def test_another_gpus_newer_table_is_current_for_that_gpu_only():
    """An sm_120 owner (or an H100 run) publishes a newer, fresh headline table: the H200's stays the figures'
    current table, the other is current for its own GPU, and `archive`/data/README.md keep both."""
    df = pd.DataFrame(_on(_rows("h200.csv", "headline", "2026-12-01T10:00:00Z", True), "NVIDIA H200")
                      + _on(_rows("rtx.csv", "headline", "2026-12-02T10:00:00Z", False),
                            "NVIDIA RTX PRO 6000 Blackwell Server Edition"))
    assert results.current_tables(df).source.tolist() == ["h200.csv"], "the reference GPU's, stale as it is"
    assert set(results.current_rows("headline", df).source) == {"h200.csv"}
    every = results.current_tables(df, gpu=None)
    assert sorted(every.source) == ["h200.csv", "rtx.csv"] and set(every.gpu) == {
        "NVIDIA H200", "NVIDIA RTX PRO 6000 Blackwell Server Edition"}
    rtx = results.current_tables(df, gpu="NVIDIA RTX PRO 6000 Blackwell Server Edition")
    assert rtx.source.tolist() == ["rtx.csv"] and not rtx.stale.iloc[0]


def test_a_run_of_another_gpu_alone_reads_as_it_is():
    """A run folder with no H200 rows (an sm_120 owner's notebooks on their own tables) still has current tables."""
    df = pd.DataFrame(_on(_rows("a.csv", "headline", "2026-12-01T10:00:00Z", False), "NVIDIA H100 80GB HBM3")
                      + _on(_rows("b.csv", "headline", "2026-12-02T10:00:00Z", False), "NVIDIA H100 80GB HBM3"))
    assert results.current_tables(df).source.tolist() == ["b.csv"]
    assert results.is_current(df).tolist() == [False, False, True, True]


def test_each_gpus_newest_correctness_table_is_kept(tmp_path):
    """load_correctness reads the H200's table even where another GPU's is newer; superseded() keeps both."""
    for name, gpu, date in (("correctness_h200_20261201-0000.csv", "NVIDIA H200", "2026-12-01T00:00:00Z"),
                            ("correctness_h200_20260101-0000.csv", "NVIDIA H200", "2026-01-01T00:00:00Z"),
                            ("correctness_h100_20261202-0000.csv", "NVIDIA H100 80GB HBM3", "2026-12-02T00:00:00Z")):
        pd.DataFrame([dict(impl="mma", check="golden", passed=True, git_commit="abc", gpu=gpu, date=date)]).to_csv(
            tmp_path / name, index=False)
    assert results.load_correctness(tmp_path).source.iloc[0] == "correctness_h200_20261201-0000.csv"
    assert results.load_correctness(tmp_path, gpu=None).source.iloc[0] == "correctness_h100_20261202-0000.csv"
    assert results.load_correctness(tmp_path, gpu="NVIDIA H100 80GB HBM3").source.iloc[0] == (
        "correctness_h100_20261202-0000.csv")
    pd.DataFrame([dict(sweep="headline", provider="flashmla", kernel="flashmla", gpu="NVIDIA H200",
                       date="2026-12-01T00:00:00Z", git_commit="abc", median_us=1.0)]).to_csv(
        tmp_path / "bench_h200_20261201-0000_headline.csv", index=False)
    moving = {p.name for p in results.superseded(tmp_path)}
    assert moving == {"correctness_h200_20260101-0000.csv"}


def test_tables_of_two_other_gpus_never_compete_and_a_missing_gpu_is_said():
    """No H200 rows but an H100's and an RTX's table of one sweep: no silent winner across GPUs; a GPU named that
    the frame lacks (a typo) and a sweep only another GPU measured are errors, not empty frames."""
    rtx = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    two = pd.DataFrame(_on(_rows("h100.csv", "headline", "2026-12-01T10:00:00Z", False), "NVIDIA H100 80GB HBM3")
                       + _on(_rows("rtx.csv", "headline", "2026-12-02T10:00:00Z", False), rtx))
    with pytest.raises(ValueError, match="H100.*RTX"):
        results.current_tables(two)
    assert results.current_tables(two, gpu=rtx).source.tolist() == ["rtx.csv"]
    mixed = pd.DataFrame(_on(_rows("h200.csv", "headline", "2026-12-01T10:00:00Z", False), "NVIDIA H200")
                         + _on(_rows("rtx.csv", "sm120only", "2026-12-02T10:00:00Z", False), rtx))
    with pytest.raises(ValueError, match="'H200'"):
        results.current_tables(mixed, gpu="H200")
    with pytest.raises(KeyError, match="sm120only"):
        results.current_rows("sm120only", mixed)
    assert set(results.current_rows("sm120only", mixed, gpu=rtx).source) == {"rtx.csv"}


def test_a_correctness_table_without_a_gpu_column_is_the_h200s(tmp_path):
    """Early tables name no GPU: they compete with the H200's only, and an H100's table beside them stays."""
    for name, gpu, date in (("correctness_h200.csv", None, "2026-12-03T00:00:00Z"),
                            ("correctness_h200_20261201-0000.csv", "NVIDIA H200", "2026-12-01T00:00:00Z"),
                            ("correctness_h100_20261202-0000.csv", "NVIDIA H100 80GB HBM3", "2026-12-02T00:00:00Z")):
        row = dict(impl="mma", check="golden", passed=True, git_commit="abc", date=date)
        pd.DataFrame([row if gpu is None else dict(row, gpu=gpu)]).to_csv(tmp_path / name, index=False)
    assert results.load_correctness(tmp_path).source.iloc[0] == "correctness_h200.csv"
    assert results.load_correctness(tmp_path, gpu="NVIDIA H100 80GB HBM3").source.iloc[0] == (
        "correctness_h100_20261202-0000.csv")
    pd.DataFrame([dict(sweep="headline", provider="flashmla", kernel="flashmla", gpu="NVIDIA H200",
                       date="2026-12-01T00:00:00Z", git_commit="abc", median_us=1.0)]).to_csv(
        tmp_path / "bench_h200_20261201-0000_headline.csv", index=False)
    assert {p.name for p in results.superseded(tmp_path)} == {"correctness_h200_20261201-0000.csv"}
