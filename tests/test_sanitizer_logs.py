"""Reading compute-sanitizer logs back (workbench.report.results.load_sanitizer): hand-written logs in the tools' formats,
then the committed folders."""
import json

import pytest

from workbench import registry
from workbench.gpu_check import checked_impls
from workbench.report.results import folder_key, kernel_names_ever, load_sanitizer, sanitizer_summary

RACE = """# compute-sanitizer --tool racecheck ...
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at k+0x10 in k.py:3
=========     and Read access at k+0x20 in k.py:4 [31 hazards]
=========
sanitizer case wgmma_f16_2cta (h20-sq2-k70-bs61-sinkmixed-tklen-extra-bs2-nan, combine pdl=rule): passed=True rel=1e-3
========= RACECHECK SUMMARY: 3 hazards displayed (2 errors, 1 warning)
"""
MEM_OLD = """========= COMPUTE-SANITIZER
sanitizer case mma: passed=False rel=2.00e-01
========= ERROR SUMMARY: 1 error
"""
TIMED_OUT = """========= COMPUTE-SANITIZER
sanitizer case wgmma_f16 (h1-k1-bs2-one-token, combine pdl=False): passed=True rel=0.00e+00
"""
SYNC = """========= COMPUTE-SANITIZER
sanitizer case wgmma_f16 (h20-sq2-k70-bs61-sinkmixed-tklen-extra-bs2-nan, combine pdl=rule): passed=True rel=1e-3
========= ERROR SUMMARY: 0 errors
"""


@pytest.fixture
def folders(tmp_path):
    old, new = tmp_path / "sanitizer_h200_20990101-0000", tmp_path / "sanitizer_h200_20990102-0000"
    old.mkdir()
    new.mkdir()
    (old / "sanitizer_mma.log").write_text(MEM_OLD)
    (old / "synccheck_wgmma_f16.log").write_text(SYNC.replace("0 errors", "4 errors"))
    (new / "racecheck_wgmma_f16_2cta.log").write_text(RACE)           # wgmma_f16_2cta, not wgmma_f16 + "_2cta"
    (new / "synccheck_wgmma_f16.log").write_text(SYNC)
    (new / "racecheck_wgmma_f16_case-h1-k1-bs2-one-token.log").write_text(TIMED_OUT)
    (old / "memcheck_is_not_a_prefix.log").write_text(SYNC)             # no tool's prefix: left out
    (old / "sanitizer_wgmma_xchg.log").write_text(SYNC)                # clean in the older folder ...
    (new / "sanitizer_wgmma_xchg.log").write_text(TIMED_OUT)           # ... timed out in the newer one
    (new / "racecheck_probe_plain.log").write_text(RACE)              # not a kernel: left out
    (new / "check.log").write_text("golden: 100%")                    # not a tool's log: left out
    (tmp_path / "sanitizer_mma.log").write_text(MEM_OLD)              # loose in data/, not a folder: left out
    (new / "sanitizer.meta.json").write_text(json.dumps(dict(git_commit="abc", kernel_hash="000000000000",
                                                             gpu="NVIDIA H200")))
    return tmp_path


def test_each_log_is_one_row_with_its_tool_kernel_and_counts(folders):
    df = load_sanitizer(folders).set_index("log")
    assert sorted(df.index) == sorted(["sanitizer_mma.log", "synccheck_wgmma_f16.log", "racecheck_wgmma_f16_2cta.log",
                                       "synccheck_wgmma_f16.log", "racecheck_wgmma_f16_case-h1-k1-bs2-one-token.log",
                                       "sanitizer_wgmma_xchg.log", "sanitizer_wgmma_xchg.log"])
    race = df.loc["racecheck_wgmma_f16_2cta.log"]
    assert (race.kernel, race.tool, race.args, race.errors, race.warnings) == ("wgmma_f16_2cta", "racecheck", "", 2, 1)
    assert race.case == "h20-sq2-k70-bs61-sinkmixed-tklen-extra-bs2-nan" and race.case_passed
    assert race.gpu == "NVIDIA H200" and race.stale  # a kernel hash that is not the checkout's
    old = df.loc["sanitizer_mma.log"]
    assert (old.tool, old.errors, old.case, old.case_passed) == ("memcheck", 1, "", False)
    assert old.stale is None or old.stale != old.stale  # no provenance: unknown, not fresh
    cut = df.loc["racecheck_wgmma_f16_case-h1-k1-bs2-one-token.log"]
    assert cut.args == "case-h1-k1-bs2-one-token" and cut.errors != cut.errors  # no summary: NaN, never 0
    assert cut.combine_pdl == "False"


def test_summary_takes_the_newest_folder_of_the_default_case(folders):
    s = sanitizer_summary(load_sanitizer(folders)).set_index(["kernel", "tool"])
    assert s.loc[("wgmma_f16", "synccheck"), "errors"] == 0          # the newer folder's, not 4
    assert s.loc[("wgmma_f16", "synccheck"), "folder"] == "sanitizer_h200_20990102-0000"
    assert ("wgmma_f16", "racecheck") not in s.index                 # only a case with extra arguments exists
    assert s.loc[("mma", "memcheck"), "errors"] == 1
    cut = s.loc[("wgmma_xchg", "memcheck")]  # the newest log has no summary: unknown, not the older folder's 0
    assert cut.folder == "sanitizer_h200_20990102-0000" and cut.errors != cut.errors


def test_summary_orders_folders_of_two_gpus_by_their_dates(tmp_path):
    """An H100 folder newer than an H200 one is the newer, though "sanitizer_h100..." sorts before "sanitizer_h200..."
    by name; and an older H100 folder stays older."""
    for name, errors in (("sanitizer_h200_20990101-0000", 4), ("sanitizer_h100_80gb_hbm3_20990102-0000", 0),
                         ("sanitizer_h100_80gb_hbm3_20981231-0000", 7)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "synccheck_wgmma_f16.log").write_text(SYNC.replace("0 errors", f"{errors} errors"))
    s = sanitizer_summary(load_sanitizer(tmp_path)).set_index(["kernel", "tool"])
    assert s.loc[("wgmma_f16", "synccheck"), "folder"] == "sanitizer_h100_80gb_hbm3_20990102-0000"
    assert s.loc[("wgmma_f16", "synccheck"), "errors"] == 0
    (tmp_path / "sanitizer_h100_80gb_hbm3_20990102-0000" / "synccheck_wgmma_f16.log").unlink()
    s = sanitizer_summary(load_sanitizer(tmp_path)).set_index(["kernel", "tool"])
    assert s.loc[("wgmma_f16", "synccheck"), "folder"] == "sanitizer_h200_20990101-0000"


def test_folders_sort_by_the_date_their_names_end_with():
    """Minutes and seconds (publish names a second folder of one minute to the second), across GPUs."""
    names = ["sanitizer_h200_20261205-0431", "sanitizer_h100_80gb_hbm3_20261205-043107",
             "sanitizer_h100_80gb_hbm3_20261204-2359", "sanitizer_h200_20261205-0430"]
    assert sorted(names, key=folder_key) == [names[2], names[3], names[0], names[1]]


# checked kernels whose racecheck and synccheck logs are not committed yet, with why; memcheck has no such list.
# An entry must name a kernel that really lacks both logs, so it goes as soon as they are committed
NOT_YET_RACE_SYNC_CHECKED: dict[str, str] = {}


def test_committed_logs_cover_every_kernel_with_every_tool():
    """What the issue-9 note claims of data/: the newest logs run every checked kernel's case under memcheck,
    racecheck and synccheck (but the kernels NOT_YET_RACE_SYNC_CHECKED names, under memcheck alone), each case
    passed, and memcheck and synccheck found nothing."""
    s = sanitizer_summary(load_sanitizer())
    assert set(checked_impls()) <= set(s[s.tool == "memcheck"].kernel)
    assert set(NOT_YET_RACE_SYNC_CHECKED) <= set(checked_impls())
    for tool in ("racecheck", "synccheck"):
        have = set(s[s.tool == tool].kernel)
        assert set(checked_impls()) - set(NOT_YET_RACE_SYNC_CHECKED) <= have, tool
        assert not set(NOT_YET_RACE_SYNC_CHECKED) & have, f"{tool} logs exist now: drop the kernel from the list"
    assert s.case_passed.eq(True).all()  # None (no passed= line) is not a pass
    assert (s[s.tool != "racecheck"].errors == 0).all()
    assert set(s.kernel) <= set(kernel_names_ever()), "every log is a kernel's, registered now or in rungs.csv"
    assert set(registry.names()) < set(kernel_names_ever())


def test_a_removed_rungs_logs_keep_its_name(tmp_path):
    """A rung that left the registry (data/rungs.csv lists it) is still read as itself, not as a registered
    kernel whose name it starts with, nor dropped."""
    (tmp_path / "rungs.csv").write_text("name,status\ntile512,kept\ntile512_3d,removed\nwgmma_rope,removed\n")
    folder = tmp_path / "sanitizer_h200_20990101-0000"
    folder.mkdir()
    (folder / "sanitizer_tile512_3d.log").write_text(SYNC)
    (folder / "sanitizer_wgmma_rope.log").write_text(SYNC)
    (folder / "sanitizer_tile512.log").write_text(SYNC)
    df = load_sanitizer(tmp_path)
    assert sorted(zip(df.kernel, df.args)) == [("tile512", ""), ("tile512_3d", ""), ("wgmma_rope", "")]
