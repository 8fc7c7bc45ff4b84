"""A correctness run cut short (a device call's time limit) still leaves the rows it checked."""
from types import SimpleNamespace

import pandas as pd
import pytest

from workbench import gpu_check


def test_a_cut_run_leaves_its_rows_in_the_partial_table(tmp_path, monkeypatch):
    def row(check, case):
        return dict(check=check, case=case, impl="auto", passed=True)

    monkeypatch.setattr(gpu_check, "provenance", lambda: dict(git_commit="abc", gpu="H200"))
    monkeypatch.setattr(gpu_check, "golden_names", lambda: ["g1", "g2"])
    monkeypatch.setattr(gpu_check, "golden_rows",
                        lambda name, impls=None, device="cuda": [row("golden_vs_flashmla", name)])
    monkeypatch.setattr(gpu_check, "gpu_cases", lambda: ("c1", "c2"))

    def case_rows(entry, i, impls=None, device="cuda"):
        if entry == "c2":
            raise TimeoutError("the device call's limit")
        return [row("random_vs_reference", entry)]
    monkeypatch.setattr(gpu_check, "case_rows", case_rows)
    writer = gpu_check.partial_writer(tmp_path, "correctness_h200.csv")
    with pytest.raises(TimeoutError):
        gpu_check.run_checks(device="cpu", progress=False, on_rows=writer)
    table = pd.read_csv(writer.path)
    assert writer.path.name == "correctness_h200.partial.csv"
    assert list(table.case) == ["g1", "g2", "c1"] and set(table.git_commit) == {"abc"}


def test_a_whole_run_calls_back_after_every_case(monkeypatch):
    seen = []
    monkeypatch.setattr(gpu_check, "golden_names", lambda: ["g1"])
    monkeypatch.setattr(gpu_check, "golden_rows", lambda name, impls=None, device="cuda": [dict(check="g")])
    monkeypatch.setattr(gpu_check, "gpu_cases", lambda: ("c1",))
    monkeypatch.setattr(gpu_check, "case_rows", lambda entry, i, impls=None, device="cuda": [dict(check="c")])
    monkeypatch.setattr(gpu_check.catalogue, "get", lambda _: SimpleNamespace(build=lambda device: None))
    monkeypatch.setattr(gpu_check, "bitwise_rows", lambda impl, device, case: [dict(check="b", impl=impl)])
    rows = gpu_check.run_checks(device="cpu", progress=False, impls=["auto", "mma"],
                                on_rows=lambda r: seen.append(len(r)))
    assert seen == [1, 2, 3] and [r["check"] for r in rows] == ["g", "c", "b"], "bitwise: checked kernels only"
