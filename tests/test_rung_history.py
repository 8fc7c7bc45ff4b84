"""The ladder as history (data/rungs.csv): every kernel ever registered, kept or removed, with a commit that runs it.

A removed rung leaves the registry and the code but not the record: its row names what it tried, the prediction its
registry entry made before it was measured, the commit where it can still be run (``git worktree add ../ladder
<commit>``, then ``impl=<name>`` there) and the tables in data/ (or data/archive/) that hold its measured rows. These tests keep the
record and the registry in step: every registered kernel has a row, every kept row is registered, no removed one is,
and every commit named is in this repository's history.
"""
import csv
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from workbench import registry
from workbench.report.results import find_table

ROOT = Path(__file__).resolve().parents[1]
RUNGS = ROOT / "data" / "rungs.csv"
COLUMNS = ["name", "rung", "kind", "tried", "prediction", "status", "commit", "added_in", "tables"]


def _rows() -> list[dict]:
    with open(RUNGS, newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == COLUMNS
        return list(reader)


def _git(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


def test_the_record_is_well_formed():
    rows = _rows()
    names = [r["name"] for r in rows]
    assert len(names) == len(set(names)), "one row per kernel"
    for r in rows:
        assert r["status"] in ("kept", "removed"), r
        assert r["kind"] in ("split", "fused", "reference", "probe"), r
        assert r["tried"].strip(), r
        assert re.fullmatch(r"[0-9a-f]{40}", r["commit"]) and re.fullmatch(r"[0-9a-f]{40}", r["added_in"]), r
        for t in filter(None, r["tables"].split(";")):
            assert find_table(t).is_file(), f"{r['name']}: no table {t} in data/ or data/archive/"
    rungs = [int(r["rung"]) for r in rows if r["rung"]]
    assert len(rungs) == len(set(rungs)), "each rung number once"


def test_kept_rungs_are_registered_and_removed_ones_are_not():
    rows = _rows()
    kept = {r["name"] for r in rows if r["status"] == "kept"}
    removed = {r["name"] for r in rows if r["status"] == "removed"}
    registered = set(registry.names())
    assert kept <= registered, f"kept but not registered: {sorted(kept - registered)}"
    assert not removed & registered, f"removed but still registered: {sorted(removed & registered)}"
    assert registered <= kept, f"registered with no row in data/rungs.csv: {sorted(registered - kept)}"
    for r in rows:
        if r["status"] == "kept":
            spec = registry.get(r["name"])
            assert spec.kind == r["kind"] and spec.rung == (int(r["rung"]) if r["rung"] else None), r["name"]
            assert spec.prediction == r["prediction"], f"{r['name']}: the registry's prediction is not the record's"


def test_every_commit_named_is_in_the_history():
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the commits in data/rungs.csv cannot be looked up")
    if _git("rev-parse", "--git-dir").returncode != 0:
        pytest.skip("not a git checkout (an archive or an sdist?): the commits in data/rungs.csv cannot be looked up")
    if _git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        pytest.skip("a shallow clone holds only part of the history: `git fetch --unshallow` to check data/rungs.csv's "
                    "commits")
    commits = {c for r in _rows() for c in (r["commit"], r["added_in"])}
    for c in sorted(commits):
        assert _git("cat-file", "-e", f"{c}^{{commit}}").returncode == 0, f"{c}: no such commit"
        assert _git("merge-base", "--is-ancestor", c, "HEAD").returncode == 0, f"{c}: not in HEAD's history"


def test_each_removed_rungs_commit_registers_it():
    """At the commit named, the catalog registers the removed rung by name."""
    if shutil.which("git") is None or _git("rev-parse", "--git-dir").returncode != 0:
        pytest.skip("not a git checkout")
    if _git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        pytest.skip("a shallow clone holds only part of the history")
    for r in _rows():
        if r["status"] != "removed":
            continue
        src = _git("show", f"{r['commit']}:workbench/kernels/catalog.py")
        assert src.returncode == 0, src.stderr
        # a positional name (register's older entries) or a keyword one (catalog._block since d6327f3)
        assert re.search(rf"""(\(\s*|name=)["']{re.escape(r['name'])}["']""", src.stdout), (
            f"{r['name']} is not registered at {r['commit']}")
