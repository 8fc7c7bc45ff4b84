"""Benchmark harness on the CPU: schema, skipped providers, sweeps, the batch model."""
import numpy as np
import pandas as pd
import pytest
import torch

from workbench import bench
from workbench.bench import COLUMNS, BenchShape, bench_one, fit_batch_model, rows_frame, summary_markdown, sweep_shapes
from workbench.bench.sweeps import CROSSOVER_PROVIDERS


class _NoPool:
    def inputs(self, shape, **_):
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
    from workbench.report.results import DATA, _tables, table_name
    tables = [p for p in _tables(DATA, "bench_*.csv") if not table_name(p).endswith(".fit.csv")]  # archive's gzipped
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
    assert all({"auto", "flashmla", "gather", "gather_async", "mma"} <= set(p) for _, p, *_ in batch)  # issue 23
    assert all({"eager", "graph"} <= set(m) for _, _, m, _ in batch), "graph at every batch: the kernels' own time"
    prod = sweep_shapes("production")[0][0]
    assert (prod.topk, prod.block_size, prod.extra_topk, prod.extra_block_size) == (128, 256, 512, 64)
    # the rule's candidates by name where the production shapes are graph-replayed: its only two-scope crossover
    timed = {}
    for s, provs, modes, _ in sweep_shapes("production"):
        if "graph" in modes:
            timed.setdefault((s.batch, s.heads), set()).update(provs)
    assert set(timed) == {(b, h) for b in bench.BATCHES for h in (16, 32, 64, 128)}
    assert all(set(CROSSOVER_PROVIDERS) | {"auto", "flashmla"} <= p for (b, h), p in timed.items() if b <= 8 or h <= 32)
    # from b16 at 64 and 128 heads the rungs the rule picks among for calls of two scopes
    large = [p for (b, h), p in timed.items() if b > 8 and h > 32]
    assert large and all({"auto", "flashmla", "wgmma_xchg", "wgmma_ws_h64"} <= p for p in large)
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


# ----------------------------------------------------------------------------- host overhead (issue 10)

def test_overhead_sweep_covers_the_issue():
    from workbench.bench.timing import MODES
    assert "overhead" in bench.SWEEPS
    items = sweep_shapes("overhead")
    assert {(s.batch, s.heads, s.topk) for s, *_ in items} == {(1, 64, 512), (64, 16, 2048)}
    for _, providers, modes, config in items:
        assert set(providers) == {"auto", "auto+plan", "auto+compiled", "flashmla", "launch_floor", "launch_floor2"} and config is None
        assert {"eager_idle", "graph", "overhead"} <= set(modes)
    for name in bench.SWEEPS:  # every sweep asks only for modes bench_one knows
        assert all(set(modes) <= set(MODES) for _, _, modes, _ in sweep_shapes(name)), name


def test_a_sink_pool_gives_every_call_of_a_shape_one_sink_the_reference_reads():
    """InputPool.inputs(sink=True): each rotation of a shape's inputs carries the same [heads] fp32 sink beside the
    sink-less inputs, unchanged, and the fp32 reference's output moves with it (each row times
    1/(1+exp(sink - lse)), which no sink leaves 1)."""
    from workbench import decode
    pool = bench.InputPool("cpu", pool_tokens=4096)
    plain = pool.inputs(BenchShape(2, 5, 64, block_size=64), rotations=2)
    sunk = pool.inputs(BenchShape(2, 5, 64, block_size=64), rotations=2, sink=True)
    sink = sunk[0]["attn_sink"]
    assert sink.dtype == torch.float32 and tuple(sink.shape) == (5,) and all(kw["attn_sink"] is sink for kw in sunk)
    for a, b in zip(plain, sunk):
        assert set(b) - set(a) == {"attn_sink"}
        assert all(torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a)
    out, lse = decode.sparse_mla_decode(**plain[0], impl="reference")
    out_s, lse_s = decode.sparse_mla_decode(**sunk[0], impl="reference")
    factor = 1.0 / (1.0 + torch.exp(sink.view(1, 1, 5, 1) - lse.transpose(1, 2).unsqueeze(-1)))  # [b, s_q, h, 1]
    assert torch.equal(lse_s, lse)
    torch.testing.assert_close(out_s.float(), (out.float() * factor).to(torch.bfloat16).float(), atol=0, rtol=2 ** -7)


class _SinkLoggingPool(bench.InputPool):
    def __init__(self):
        super().__init__("cpu", pool_tokens=4096)
        self.asked = []

    def inputs(self, shape, rotations=bench.ROTATIONS, sink=False):
        self.asked.append(sink)
        return super().inputs(shape, rotations, sink=sink)


@pytest.mark.parametrize("provider, sink", [("reference", False), ("reference+sink", True)],
                         ids=["plain", "with-sink"])
def test_a_sink_provider_is_checked_on_inputs_with_a_sink(fake_timers, provider, sink):
    """bench_one asks the pool for sink inputs for a "+sink" provider (and only then), checks the decode it runs
    against the reference on those same inputs (SinkProvider.prepare refuses inputs without a sink) and names the
    rows after it."""
    pool = _SinkLoggingPool()
    rows = bench_one(BenchShape(2, 5, 64, block_size=64), provider, ("eager",), pool=pool,
                     ceilings=dict(hbm_copy_gbps=1.0, gemm_tflops=1.0), prov={"gpu": "cpu"})
    assert pool.asked == [sink]
    assert [(r["provider"], r["kernel"], r["status"], r["check_passed"]) for r in rows] == \
        [(provider, "reference", "ok", True)]


def test_a_sink_provider_refuses_what_takes_no_sink():
    from workbench.bench import providers
    p = bench.make_provider("reference+sink")
    assert isinstance(p, providers.SinkProvider) and p.name == "reference+sink" and p.sink
    with pytest.raises(ValueError, match="no attn_sink"):
        p.prepare(bench.InputPool("cpu", pool_tokens=4096).inputs(BenchShape(1, 2, 8, block_size=64), 1)[0])
    for name in ("gather+sink", "gather_fine+sink", "launch_floor+sink", "reference+sink+sink"):
        with pytest.raises(ValueError, match="takes none"):
            bench.make_provider(name)
    assert providers.base_impl("auto+sink") == "auto" and providers.base_impl("wgmma_ws_h64+sink") == "wgmma_ws_h64"
    assert providers.base_impl("auto+plan+sink") == "auto"
    assert not hasattr(p, "is_probe"), "a decode's sink provider is checked against the reference"
    assert {"auto+sink", "flashmla+sink"} <= set(bench.provider_names())
    from workbench.report import results  # FlashMLA's rows with a sink are a peer's too: never stale by our code
    assert all(peer + providers.SINK in results.PEER_PROVIDERS for peer in results.PEER_PROVIDERS
               if not peer.endswith(providers.SINK))


def test_a_sink_provider_keeps_what_the_bench_reads_of_the_provider_it_wraps(monkeypatch):
    """An isolation variant ("auto~no_loads") is timed without the reference check (is_probe: its output is wrong by
    design); with "+sink" it must stay so, or every row would read "wrong"."""
    from workbench.bench import providers

    class Variant:
        name, is_probe, spec, ran = "auto~no_loads", True, None, None

        def prepare(self, kw, config=None):
            return lambda: None
    real = providers.make_provider
    monkeypatch.setattr(providers, "make_provider", lambda n: Variant() if n == "auto~no_loads" else real(n))
    p = providers.SinkProvider("auto~no_loads")
    assert p.name == "auto~no_loads+sink" and p.is_probe and p.spec is None and p.ran is None
    assert providers.tuned_columns(p) == {}


def test_the_sink_sweep_times_the_headline_shapes_with_and_without_a_sink():
    items = sweep_shapes("sink")
    assert [s for s, *_ in items] == list(bench.HEADLINE)
    for _, providers, modes, config in items:
        assert set(providers) == {"auto", "auto+sink", "flashmla", "flashmla+sink"}
        assert modes == ("graph",) and config is None


def test_heads_sweep_times_the_odd_head_counts_beside_the_next_power_of_two():
    """Issue 25: heads 20, 24, 40 and 48 at b64 topk2048, each beside 32 and 64 in the same run, with FlashMLA,
    both floors, auto and every crossover rung (the 32-head portable rung among them)."""
    items = sweep_shapes("heads")
    got = {(s.batch, s.heads, s.topk) for s, *_ in items}
    assert {(64, h, 2048) for h in (20, 24, 32, 40, 48, 64)} <= got
    for _, providers, modes, config in items:
        assert {"auto", "flashmla", "gather", "gather_async", "gather_fine", "auto_portable", "portable_ws_h32q",
                "portable_ws_h32t", "wgmma_ws_h64"} <= set(providers)
        assert modes == ("graph",) and config is None
        assert len(set(providers)) == len(providers)

def test_summarize_and_difference_quantiles():
    import triton.testing
    xs = [5.0, 1.0, 4.0, 2.0, 3.0, 10.0]
    assert bench.summarize(xs) == pytest.approx(tuple(triton.testing._quantile(xs, bench.QUANTILES)))
    assert bench.difference_quantiles([10.0], [3.0]) == (7.0, 7.0, 7.0)
    a, b = [30.0, 31.0, 35.0], [8.0, 9.0]
    med, p20, p80 = bench.difference_quantiles(a, b)
    every = np.subtract.outer(a, b).ravel()
    assert (med, p20, p80) == pytest.approx(tuple(np.quantile(every, [0.5, 0.2, 0.8])))
    assert p20 <= med <= p80


@pytest.fixture
def fake_timers(monkeypatch):
    """The GPU timers replaced by fixed samples; counts how often each mode was timed."""
    calls = {}
    samples = {"eager": [10.0, 11.0, 12.0], "eager_idle": [30.0, 31.0, 33.0, 36.0], "graph": [8.0, 9.0, 9.5]}

    def timer(mode):
        def run(fns):
            assert len(fns) == bench.ROTATIONS and all(callable(f) for f in fns)
            calls[mode] = calls.get(mode, 0) + 1
            if isinstance(samples[mode], Exception):
                raise samples[mode]
            return samples[mode]
        return run
    for mode in list(bench.TIMERS):
        monkeypatch.setitem(bench.TIMERS, mode, timer(mode))
    return calls, samples


CEILINGS = dict(hbm_copy_gbps=4000.0, gemm_tflops=700.0)


def _tiny_pool():
    return bench.InputPool("cpu", pool_tokens=1024)


def test_overhead_rows_are_eager_idle_minus_graph_of_the_same_calls(fake_timers):
    calls, samples = fake_timers
    rows = bench_one(BenchShape(2, 16, 64), "reference", ("eager", "eager_idle", "graph", "overhead"),
                     pool=_tiny_pool(), ceilings=CEILINGS, sweep="overhead", prov={"gpu": "cpu"})
    assert calls == {"eager": 1, "eager_idle": 1, "graph": 1}, "each mode timed once; overhead reuses them"
    by = {r["mode"]: r for r in rows}
    assert [r["mode"] for r in rows] == ["eager", "eager_idle", "graph", "overhead"]
    assert all(r["status"] == "ok" and r["check_passed"] for r in rows)
    every = np.subtract.outer(samples["eager_idle"], samples["graph"]).ravel()
    o = by["overhead"]
    assert (o["median_us"], o["p20_us"], o["p80_us"]) == pytest.approx(tuple(np.quantile(every, [0.5, 0.2, 0.8])))
    assert by["graph"]["median_us"] == pytest.approx(9.0) and by["eager_idle"]["median_us"] == pytest.approx(32.0)
    assert "gbps" not in o and by["graph"]["gbps"] > 0, "an overhead is not a kernel time: no GB/s"
    df = rows_frame(rows)
    assert list(df.columns) == COLUMNS and np.isnan(df.set_index("mode").loc["overhead", "gbps"])


def test_overhead_alone_times_what_it_needs_and_records_a_failed_timer(fake_timers):
    calls, samples = fake_timers
    rows = bench_one(BenchShape(2, 16, 64), "reference", ("overhead",), pool=_tiny_pool(), ceilings=CEILINGS)
    assert calls == {"eager_idle": 1, "graph": 1} and [r["mode"] for r in rows] == ["overhead"]
    calls.clear()
    samples["graph"] = RuntimeError("capture failed")
    rows = bench_one(BenchShape(2, 16, 64), "reference", ("eager_idle", "graph", "overhead"), pool=_tiny_pool(),
                     ceilings=CEILINGS)
    assert [r["status"] for r in rows] == ["ok", "error", "error"]
    assert all("capture failed" in r["reason"] for r in rows[1:]) and calls == {"eager_idle": 1, "graph": 1}


def test_unknown_mode_is_an_error():
    with pytest.raises(ValueError, match="mode"):
        bench_one(BenchShape(2, 16, 64), "reference", ("eager", "cold"), pool=_NoPool(), ceilings=CEILINGS)


def test_plan_provider_is_skipped_until_the_plan_api_exists(monkeypatch):
    import workbench
    monkeypatch.delattr(workbench, "plan_decode", raising=False)
    with pytest.raises(bench.Skip, match="plan_decode"):
        bench.make_provider("auto+plan")
    rows = bench_one(BenchShape(1, 64, 512), "auto+plan", ("eager_idle", "graph", "overhead"), pool=_NoPool(),
                     ceilings=CEILINGS, prov={"gpu": "cpu"})
    assert [r["status"] for r in rows] == ["skipped"] * 3 and all("plan_decode" in r["reason"] for r in rows)


def test_plan_provider_plans_once_per_shape_outside_the_call(monkeypatch):
    import workbench
    from workbench.bench import providers
    made, launched = [], []

    def plan_decode(q, cache, indices, *, sm_scale=None, attn_sink=None, topk_length=None, extra_cache=None,
                    extra_indices=None, extra_topk_length=None, impl="auto", config=None):
        made.append(dict(shape=tuple(indices.shape), impl=impl, config=config))
        return object()

    def decode(q, cache, indices, *, sm_scale=None, attn_sink=None, topk_length=None, extra_cache=None,
               extra_indices=None, extra_topk_length=None, impl="auto", config=None, plan=None):
        launched.append((plan, indices))
        return "out", "lse"
    monkeypatch.setattr(workbench, "plan_decode", plan_decode, raising=False)
    monkeypatch.setattr(providers, "sparse_mla_decode", decode)
    p = bench.make_provider("auto+plan")
    assert p.name == "auto+plan"
    q, cache = torch.zeros(2, 1, 16, 512), torch.zeros(4, 64, 1, 584, dtype=torch.uint8)
    rotations = [dict(q=q, cache=cache, indices=torch.full((2, 1, 32), i, dtype=torch.int32), sm_scale=0.04)
                 for i in range(3)]
    fns = [p.prepare(kw) for kw in rotations]
    assert made == [dict(shape=(2, 1, 32), impl="auto", config=None)], "one plan for every rotation of a shape"
    assert [f() for f in fns] == [("out", "lse")] * 3
    plans = {id(plan) for plan, _ in launched}
    assert len(plans) == 1 and [int(ix[0, 0, 0]) for _, ix in launched] == [0, 1, 2], "each rotation's own data"
    p.prepare(dict(rotations[0], indices=torch.zeros(2, 1, 64, dtype=torch.int32)))
    assert len(made) == 2 and made[1]["shape"] == (2, 1, 64), "a new shape gets a new plan"


def test_plan_provider_is_listed_and_records_what_auto_runs():
    shape = BenchShape(1, 64, 512)
    assert "auto+plan" in bench.provider_names()
    assert bench.kernel_of("auto+plan", shape) == bench.kernel_of("auto", shape) != "auto"
    assert bench.config_columns("auto+plan", None) == dict(config="")
    with pytest.raises(ValueError, match="provider"):
        bench.make_provider("cutlass+plan")


def test_compiled_op_provider_is_listed_records_what_auto_runs_and_needs_cuda(monkeypatch):
    shape = BenchShape(1, 64, 512)
    assert "auto+compiled" in bench.provider_names()
    assert bench.kernel_of("auto+compiled", shape) == bench.kernel_of("auto", shape) != "auto"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(bench.Skip, match="CUDA"):
        bench.make_provider("auto+compiled")


def test_auto_is_recorded_as_the_rung_decode_runs_on_an_h200(monkeypatch):
    """The kernel column of "auto" rows is what decode resolves for that call, heads included."""
    import workbench.kernels.common as common
    from workbench import registry
    monkeypatch.setattr(common, "INTERPRET", False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: (9, 0))
    for shape, rung in ((BenchShape(64, 16, 2048), "wgmma_ws"), (BenchShape(1, 64, 512), "wgmma_f16_2cta"),
                        (BenchShape(64, 64, 2048), "wgmma_ws_h64"), (BenchShape(1, 16, 512), "wgmma_xchg")):
        assert registry.resolve("auto", "cuda", heads=shape.heads, tokens=shape.batch * shape.topk) == rung
        assert bench.kernel_of("auto", shape) == bench.kernel_of("auto+plan", shape) == rung, shape.label


def test_overhead_rows_load_and_summarise(tmp_path):
    from workbench.report.results import load_bench
    common = dict(sweep="overhead", batch=1, s_q=1, heads=64, topk=512, block_size=256, extra_topk=0,
                  extra_block_size=64, config="", status="ok", reason="", check_passed=True, gpu="x", driver="d",
                  torch="2.11", triton="3.6.0", git_commit="abc", date="2026-12-01")
    rows = []
    for provider, idle, graph in (("auto", 380.0, 20.0), ("auto+plan", 40.0, 19.0), ("flashmla", 60.0, 18.0)):
        for mode, med in (("eager_idle", idle), ("graph", graph), ("overhead", idle - graph)):
            rows.append(dict(common, provider=provider, kernel=provider, mode=mode, median_us=med, p20_us=med - 1,
                             p80_us=med + 1))
    p = tmp_path / "bench_h200_overhead.csv"
    rows_frame(rows).to_csv(p, index=False)
    df = load_bench([p])
    assert len(df) == 9 and set(df["mode"]) == {"eager_idle", "graph", "overhead"}
    table = bench.overhead_table(df).set_index("provider")
    assert table.loc["auto+plan", "overhead_us"] == pytest.approx(21.0)
    assert table.loc["auto", "eager_idle_us"] == pytest.approx(380.0) and np.isnan(table.loc["auto", "eager_us"])
    text = summary_markdown(df)
    assert "Host overhead per call" in text and "| b1-h64-sq1-k512@256 | auto+plan | 21.0 (20.0-22.0) |" in text
    assert "nan" not in text
    assert "Host overhead" not in summary_markdown(df[df["mode"] != "overhead"])


@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_auto_plan_runs_through_the_real_plan_api(fake_timers):
    """auto+plan through bench_one on the CPU (interpreter): planned once, checked against the reference."""
    calls, _ = fake_timers
    rows = bench_one(BenchShape(1, 16, 64), "auto+plan", ("graph", "overhead"), pool=_tiny_pool(), ceilings=CEILINGS,
                     sweep="overhead", prov={"gpu": "cpu"})
    assert [r["status"] for r in rows] == ["ok", "ok"], rows[0].get("reason")
    assert rows[0]["check_passed"] and rows[0]["kernel"] == bench.kernel_of("auto", BenchShape(1, 16, 64))
    assert calls == {"eager_idle": 1, "graph": 1}


def test_errata_correct_named_rows_and_refuse_a_typo(tmp_path):
    """data/errata.csv corrects a published cell without rewriting the table; an erratum matching nothing fails."""
    from workbench.report.results import apply_errata
    df = pd.DataFrame(dict(source=["t.csv"] * 3, provider=["auto", "auto", "flashmla"], batch=[64, 1, 64],
                           heads=[16, 64, 16], topk=[2048, 512, 2048], kernel=["wgmma_rope", "wgmma_rope", "flashmla"]))
    path = tmp_path / "errata.csv"
    pd.DataFrame([dict(source="t.csv", provider="auto", batch=64, heads=16, topk=2048, column="kernel",
                       recorded="wgmma_rope", corrected="wgmma_2cta", reason="why")]).to_csv(path, index=False)
    out = apply_errata(df.copy(), path)
    assert list(out.kernel) == ["wgmma_2cta", "wgmma_rope", "flashmla"]
    assert list(out.erratum) == ["why", "", ""]
    pd.DataFrame([dict(source="t.csv", provider="auto", batch=64, heads=16, topk=2048, column="kernel",
                       recorded="wgmma", corrected="x", reason="typo")]).to_csv(path, index=False)
    with pytest.raises(ValueError, match="no row of t.csv"):
        apply_errata(df.copy(), path)


def test_published_errata_apply():
    from workbench.report.results import load_bench
    df = load_bench()
    fixed = df[df.erratum.str.startswith("kernel_of resolved auto")]
    assert len(fixed) and set(fixed.kernel) == {"wgmma_2cta"}
    # a whole table's git_commit, recorded wrong at the 1102 ladder run: every row corrected, none left behind
    ladder = df[df.source == "bench_h200_20261201-1102_ladder.csv"]
    assert len(ladder) and set(ladder.git_commit) == {"f8d640a2688241437ca67544521adde34ba6a9c8"}
    assert (ladder.erratum != "").all()


def test_an_erratum_with_wildcards_corrects_every_row_it_names(tmp_path):
    """"*" in provider, batch, heads or topk matches any value; the other selectors still narrow the rows."""
    from workbench.report.results import apply_errata
    df = pd.DataFrame(dict(source=["t.csv", "t.csv", "u.csv"], provider=["auto", "flashmla", "auto"],
                           batch=[64, 1, 64], heads=[16, 64, 16], topk=[2048, 512, 2048], git_commit=["a", "a", "a"]))
    path = tmp_path / "errata.csv"
    pd.DataFrame([dict(source="t.csv", provider="*", batch="*", heads="*", topk="*", column="git_commit",
                       recorded="a", corrected="b", reason="all of t"),
                  dict(source="u.csv", provider="auto", batch=64, heads="*", topk=2048, column="git_commit",
                       recorded="a", corrected="c", reason="u's auto")]).to_csv(path, index=False)
    out = apply_errata(df.copy(), path)
    assert list(out.git_commit) == ["b", "b", "c"] and list(out.erratum) == ["all of t", "all of t", "u's auto"]
    # a table without the selector columns (a correctness table) takes only "*" there
    corr = pd.DataFrame(dict(source=["c.csv"], check=["golden"], git_commit=["a"]))
    pd.DataFrame([dict(source="c.csv", provider="auto", batch="*", heads="*", topk="*", column="git_commit",
                       recorded="a", corrected="b", reason="x")]).to_csv(path, index=False)
    with pytest.raises(ValueError, match="no column"):
        apply_errata(corr.copy(), path)


def test_the_published_correctness_tables_carry_their_errata():
    from workbench.report.results import load_correctness
    df = load_correctness(name="correctness_h200_20261201-1059.csv")
    assert set(df.git_commit) == {"f8d640a2688241437ca67544521adde34ba6a9c8"} and (df.erratum != "").all()


def test_launch_floor_providers_are_listed_in_the_overhead_sweep_and_need_cuda(monkeypatch):
    from workbench.bench import sweeps
    for name, launches in (("launch_floor", 1), ("launch_floor2", 2)):
        assert name in bench.provider_names() and name in sweeps.OVERHEAD_PROVIDERS
        assert bench.kernel_of(name, BenchShape(1, 64, 512)) == name
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        with pytest.raises(bench.Skip, match="CUDA"):
            bench.make_provider(name)
        monkeypatch.undo()
    from workbench.bench.providers import LAUNCH_FLOORS
    assert LAUNCH_FLOORS == {"launch_floor": 1, "launch_floor2": 2}


def test_a_gluon_kernel_off_its_gpu_is_skipped_not_a_stopped_sweep(monkeypatch):
    """On an sm_120 card the wgmma rungs cannot run: their rows are skipped with the reason, and the portable ones
    and the Triton ones are timed (a RuntimeError from the launcher used to end the ladder and crossover sweeps)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: (12, 0))
    for impl in ("wgmma_ws", "wgmma_f16", "wgmma_xchg", "wgmma_f16_2cta", "wgmma_ws+plan"):
        with pytest.raises(bench.Skip, match="written for sm_90; this GPU is sm_120"):
            bench.make_provider(impl)
    for impl in ("portable_ws", "tile512", "mma", "auto", "auto_portable"):
        assert bench.make_provider(impl).name == impl
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: (9, 0))
    assert bench.make_provider("wgmma_ws").name == "wgmma_ws"


def test_a_probe_row_records_the_config_it_ran():
    """The floor probes' rows say which config was timed, while 'config' stays '' (it was not forced): the
    provider's pinned one (gather_fine: 32-token tiles from 32 tokens a program, 16 below), else the autotuner's
    pick; a kernel that has not run (no best_config) adds nothing, and neither does a call whose scopes ran
    different grids."""
    import dataclasses
    from types import SimpleNamespace

    import triton

    from workbench import registry
    from workbench.bench import providers
    from workbench.bench.providers import fine_config, tuned_columns
    spec = registry.get("gather")
    assert tuned_columns(SimpleNamespace(spec=dataclasses.replace(spec, jit=object()))) == {}
    picked = type("Tuned", (), {"best_config": triton.Config({"BLOCK_T": 64}, num_warps=8, num_stages=3)})()
    tuned = SimpleNamespace(spec=dataclasses.replace(spec, jit=picked))
    assert tuned_columns(tuned) == dict(BLOCK_T=64, num_warps=8, num_stages=3)
    ring = type("Tuned", (), {"best_config": triton.Config({"BLOCK_T": 32, "NUM_STAGES": 4}, num_warps=4,
                                                           num_stages=4)})()
    assert tuned_columns(SimpleNamespace(spec=dataclasses.replace(registry.get("gather_async"), jit=ring))) == dict(
        BLOCK_T=32, num_warps=4, num_stages=4)
    pinned = SimpleNamespace(spec=dataclasses.replace(spec, jit=picked), ran=fine_config(64))
    assert tuned_columns(pinned) == dict(BLOCK_T=32, num_warps=8, num_stages=1)
    # a production shape's scopes (128 and 512 tokens at b8 h128): 16 and 64 tokens a program, two configs
    pinned.ran = providers.MIXED
    assert tuned_columns(pinned) == {}
    tuned.ran = providers.MIXED  # two autotuner keys: best_config is only the last one's
    assert tuned_columns(tuned) == {}
    tuned.ran = None
    assert tuned_columns(tuned) == dict(BLOCK_T=64, num_warps=8, num_stages=3)
    assert fine_config(16) == dict(BLOCK_T=16, num_warps=8, num_stages=1)
    assert tuned_columns(SimpleNamespace(spec=registry.get("reference"))) == {}


def test_a_probe_records_one_config_only_when_every_scope_ran_it(monkeypatch):
    """ProbeProvider.prepare (no launch until the call runs): gather_fine on one scope records its pinned config for
    that scope's programs; with an extra scope planned on another grid, MIXED."""
    from workbench import decode
    from workbench.bench import providers
    from workbench.format.cases import build_case
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the providers refuse to build without CUDA
    one = build_case(batch=2, heads=2, topk=48, block_size=61, seed=3).kwargs()
    two = build_case(batch=2, heads=2, topk=48, block_size=61, extra_topk=200, extra_block_size=69, seed=3).kwargs()
    plans = decode.split_plans(queries=2, heads=2, indices=[two["indices"], two["extra_indices"]],
                               num_sms=decode.sm_count(torch.device("cpu")))
    tps = [providers.fine_grid(ix.shape[2], pl.tokens_per_split)[1]
           for ix, pl in zip((two["indices"], two["extra_indices"]), plans)]
    assert tps[0] != tps[1], tps  # the two scopes' programs differ
    p = providers.FineProbeProvider("gather_fine")
    p.prepare(one)
    assert p.ran == providers.fine_config(tps[0])
    p.prepare(two)
    assert p.ran is providers.MIXED and providers.tuned_columns(p) == {}
