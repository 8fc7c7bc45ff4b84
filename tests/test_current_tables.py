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
