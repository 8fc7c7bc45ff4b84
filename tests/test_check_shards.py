"""check --shard I/N: N processes share one kernel's correctness check, and their rows together are the whole
table's (scripts/gpu_session.sh's CHECK_JOBS deals a slow kernel's cases to several of them)."""
from types import SimpleNamespace

import pytest
import torch

from workbench import __main__ as cli
from workbench import gpu_check

GOLDEN = ["g1", "g2", "g3"]
CASES = tuple(f"c{i}" for i in range(7))


@pytest.fixture
def fake_checks(monkeypatch):
    """run_checks over stand-ins: each row names its check, case, kernel and the position the case was run at."""
    def rows(check, case, impls, position=None):
        return [dict(check=check, case=case, impl=i, position=position) for i in impls]
    monkeypatch.setattr(gpu_check, "golden_names", lambda: list(GOLDEN))
    monkeypatch.setattr(gpu_check, "golden_rows",
                        lambda name, impls=None, device="cuda": rows("golden_vs_flashmla", name, impls))
    monkeypatch.setattr(gpu_check, "gpu_cases", lambda: CASES)
    monkeypatch.setattr(gpu_check, "case_rows", lambda entry, i, impls=None, device="cuda":
                        rows("random_vs_reference", entry, impls, position=i))
    built = []
    monkeypatch.setattr(gpu_check.catalogue, "get",
                        lambda _: SimpleNamespace(build=lambda device: built.append(device) or "bitwise-case"))
    monkeypatch.setattr(gpu_check, "bitwise_rows",
                        lambda impl, device, case: rows("run_to_run_bitwise", case, [impl]))
    return built


def _keys(rows):
    return [(r["check"], r["case"], r["impl"], r["position"]) for r in rows]


@pytest.mark.parametrize("n", [2, 3, 5, 20], ids=lambda n: f"{n}-shards")
def test_the_shards_rows_together_are_the_whole_runs(fake_checks, n):
    impls = ["auto", "mma", "wgmma_ws_h64"]  # auto has no bitwise rows; the two kernels have
    whole = _keys(gpu_check.run_checks(device="cpu", progress=False, impls=impls))
    parts = [_keys(gpu_check.run_checks(device="cpu", progress=False, impls=impls, shard=(i, n))) for i in range(n)]
    together = [k for p in parts for k in p]
    assert sorted(together) == sorted(whole) and len(set(together)) == len(together), "each row in one shard only"
    # a case keeps its position in the catalogue (it picks the kernel's config), whichever shard runs it
    assert {k for k in together if k[0] == "random_vs_reference"} == {
        ("random_vs_reference", c, i, p) for p, c in enumerate(CASES) for i in impls}
    work = len(GOLDEN) + len(CASES) + 2  # units dealt out: golden cases, catalogue cases, bitwise kernels
    sizes = sorted(len({k[:2] if k[0] != "run_to_run_bitwise" else k for k in p}) for p in parts)
    assert sizes[-1] - sizes[0] <= 1 and sum(sizes) == work, sizes


def test_a_shard_without_a_bitwise_kernel_builds_no_bitwise_case(fake_checks):
    rows = gpu_check.run_checks(device="cpu", progress=False, impls=["auto", "mma"], shard=(0, 20))
    assert _keys(rows) == [("golden_vs_flashmla", "g1", "auto", None), ("golden_vs_flashmla", "g1", "mma", None)]
    assert fake_checks == []


@pytest.mark.parametrize("shard", [(2, 2), (-1, 3), (0, 0)], ids=str)
def test_a_shard_outside_its_count_is_refused(shard):
    with pytest.raises(ValueError, match="0 <= i < n"):
        gpu_check.check_shard(shard)


@pytest.mark.parametrize("text", ["3/3", "1", "a/2", "1/2/3", "-1/2"])
def test_the_cli_refuses_a_bad_shard_in_one_usage_line(text, capsys):
    with pytest.raises(SystemExit) as e:
        cli.parser().parse_args(["check", f"--shard={text}"])  # =: "-1/2" is a value, not an option
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--shard" in err and "0 <= I < N" in err and "Traceback" not in err


def test_the_cli_reads_a_shard_and_refuses_it_with_sanitize(monkeypatch, capsys):
    assert cli.parser().parse_args(["check", "--shard", "1/3"]).shard == (1, 3)
    assert cli.parser().parse_args(["check"]).shard is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # refused before anything would run
    assert cli.main(["check", "--sanitize", "mma", "--shard", "0/2"]) == 2
    assert "--shard" in capsys.readouterr().err
