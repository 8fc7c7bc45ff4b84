"""Benchmark harness on the CPU: schema, skipped providers, sweeps, the batch model."""
import numpy as np
import pandas as pd
import pytest

from workbench import bench
from workbench.bench import COLUMNS, BenchShape, bench_one, fit_batch_model, rows_frame, summary_markdown, sweep_shapes


class _NoPool:
    def inputs(self, shape):
        raise AssertionError("a skipped provider must not build inputs")


def test_missing_provider_is_skipped_with_reason():
    rows = bench_one(BenchShape(2, 16, 64), "flashmla", ("eager", "graph"), pool=_NoPool(),
                     ceilings=dict(hbm_copy_gbps=1.0, gemm_tflops=1.0), prov={"gpu": "cpu"})
    assert [r["status"] for r in rows] == ["skipped", "skipped"]
    assert "flash_mla" in rows[0]["reason"] or "sm_90" in rows[0]["reason"]
    df = rows_frame(rows)
    assert list(df.columns) == COLUMNS and len(df) == 2


def test_unknown_provider_is_an_error():
    with pytest.raises(ValueError, match="provider"):
        bench.make_provider("cutlass")


def test_csv_schema_round_trip(tmp_path):
    row = dict(sweep="batch", provider="mma", mode="graph", batch=4, s_q=1, heads=16, topk=512, block_size=256,
               extra_topk=0, extra_block_size=64, config="", status="ok", reason="", median_us=10.0, p20_us=9.0,
               p80_us=11.0, valid_tokens=2048, bytes=1, flops=1, gbps=1.0, tflops=1.0, frac_hbm=0.1, frac_gemm=0.1,
               check_rel_err=1e-3, check_passed=True, hbm_copy_gbps=4000.0, gemm_tflops=700.0, gpu="x",
               capability="sm_90", sm_count=132, driver="d", cuda="13.0", torch="2.11", triton="3.6.0",
               git_commit="abc", date="2026-11-30")
    p = tmp_path / "b.csv"
    rows_frame([row]).to_csv(p, index=False)
    back = pd.read_csv(p)
    assert list(back.columns) == COLUMNS
    assert "median_us" in summary_markdown(back).splitlines()[0] or "median" in summary_markdown(back)


def test_committed_results_have_schema_and_provenance():
    from workbench.results import DATA
    tables = sorted(p for p in DATA.glob("bench_*.csv") if not p.name.endswith(".fit.csv"))
    assert tables
    for path in tables:
        df = pd.read_csv(path)
        assert set(df.columns) <= set(COLUMNS), (path.name, set(df.columns) - set(COLUMNS))
        if "kernel_hash" in df.columns:  # tables from the registry on: the whole schema, in order
            assert list(df.columns) == COLUMNS, path.name
        for col in ("gpu", "driver", "torch", "triton", "git_commit", "date"):
            assert df[col].notna().all(), (path.name, col)
        ok = df[df.status == "ok"]
        assert ((ok.p20_us <= ok.median_us) & (ok.median_us <= ok.p80_us)).all(), path.name
        assert ok.check_passed.all(), f"{path.name}: a timed row must have passed its reference check"


def test_sweeps_cover_the_issue():
    batch = sweep_shapes("batch")
    assert {s.batch for s, *_ in batch} == {1, 2, 4, 8, 16, 32, 64, 128, 132}
    assert {s.heads for s, *_ in batch} == {16, 32, 64, 128} and {s.topk for s, *_ in batch} == {512, 2048}
    prod = sweep_shapes("production")[0][0]
    assert (prod.topk, prod.block_size, prod.extra_topk, prod.extra_block_size) == (128, 256, 512, 64)
    assert {s.s_q for s, *_ in sweep_shapes("s_q2")} == {2}
    warps = sweep_shapes("warps")
    assert {c["num_warps"] for *_, c in warps} == {4, 8} and {c["BLOCK_T"] for *_, c in warps} == {16}
    with pytest.raises(ValueError, match="sweep"):
        sweep_shapes("nope")


def test_fit_batch_model_recovers_a_line():
    b = np.array([1, 2, 4, 8, 16, 32])
    df = pd.DataFrame(dict(provider="mma", mode="graph", heads=64, topk=2048, s_q=1, extra_topk=0, batch=b,
                           median_us=12.5 + 3.25 * b, status="ok", config=""))
    fit = fit_batch_model(df).iloc[0]
    assert fit.fixed_us == pytest.approx(12.5) and fit.per_request_us == pytest.approx(3.25)
    assert fit.r2 == pytest.approx(1.0)
