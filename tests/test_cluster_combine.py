"""Rung 27 (``wgmma_f16_cluster``): a call's splits merged inside the partial launch, as the CTAs of one cluster
(``kernels/cluster_combine.py``). On the CPU: the split plan it caps, the one launch decode makes and what reaches it,
and how a CLUSTER launch is made a cluster launch on both paths. On the GPU (sm_90): its out and lse against rung
12's partial-and-combine path (the same partial kernel; the combine kernel merged its partials apart) and the fp32
reference."""
import dataclasses

import pytest
import torch

from workbench import decode, registry
from workbench import plan as plan_mod
from workbench.format.cases import CATALOGUE, build_case
from workbench.kernels import cluster_combine, common, wgmma
from workbench.metrics import compare

CLUSTER = "wgmma_f16_cluster"


@pytest.mark.parametrize("queries, heads, topks, want", [
    (1, 64, [512], [(8, 64)]),          # rung 12's own plan: 8 splits of one tile
    (1, 16, [2048], [(8, 256)]),        # rung 12 would run 32 splits: capped at the cluster's 8
    (1, 64, [512, 128], [(4, 128), (2, 64)]),  # both scopes share the 8: 6 and 2 by topk, then whole tiles
    (64, 64, [2048], [(4, 512)]),       # 264 / 64 queries: 4 splits, under the cap, as rung 12
    (600, 64, [2048], [(1, 2048)]),     # 264 / 600 rounds to 0: one split (decode then runs it direct)
], ids=["b1-h64-k512", "b1-h16-k2048", "b1-two-scopes", "b64-under-the-cap", "b600-one-split"])
def test_the_split_plan_holds_a_call_in_one_cluster(queries, heads, topks, want):
    """Worked by hand on 132 SMs: the plan fills 2 waves of 1 program a query (64-head programs, as the plan
    counts them), 264 splits, capped at 8 for the cluster; two scopes share 8 as 5.8 + 2.2 -> 6 + 2 (largest
    remainder), and 6 splits of 512 tokens are 4 of 128 at the 64-token granule."""
    spec = registry.get(CLUSTER)
    plans = decode.spec_split_plans(spec, queries=queries, heads=heads, topks=topks, num_sms=132)
    assert [(p.num_splits, p.tokens_per_split) for p in plans] == want
    assert sum(p.num_splits for p in plans) <= cluster_combine.MAX_CLUSTER


def test_the_other_rungs_plans_are_not_capped():
    assert [registry.get(n).cluster_combine for n in registry.names("split")].count(0) == len(
        registry.names("split")) - 1
    (plan,) = decode.spec_split_plans(registry.get("wgmma_f16_2cta"), queries=1, heads=16, topks=[2048], num_sms=132)
    assert plan.num_splits == 32


@pytest.mark.parametrize("sink", [False, True], ids=["no-sink", "sink"])
@pytest.mark.parametrize("extra", [False, True], ids=["one-scope", "two-scopes"])
def test_decode_makes_one_launch_that_writes_out_and_lse(sink, extra):
    calls = []
    spec = dataclasses.replace(registry.get(CLUSTER), launch=lambda **kw: calls.append(kw))
    more = dict(extra_topk=24, extra_block_size=2) if extra else {}
    case = build_case(batch=1, s_q=2, heads=16, topk=130, block_size=61, sink=sink, seed=3, **more)
    kw = case.kwargs()
    scopes = decode.decode_scopes(kw["cache"], kw["indices"], kw.get("topk_length"), kw.get("extra_cache"),
                                  kw.get("extra_indices"), kw.get("extra_topk_length"))
    work = decode.allocate_workspace(spec, kw["q"], scopes)
    stages = decode.launch_stages(spec, q=kw["q"], scopes=scopes, attn_sink=kw.get("attn_sink"), sm_scale=0.1,
                                  config=None, work=work)
    assert work.cluster and not work.direct and len(stages) == 1  # no combine stage
    assert stages[0].inputs[-1] == "attn_sink"
    stages[0].run()
    (got,) = calls
    s_total = sum(p.num_splits for p in work.splits)
    assert s_total == 3 + extra  # 130 tokens: 3 tiles of 64; the extra scope's 24: one more
    assert work.part_lse.shape == (2, 16, s_total) and got["part_lse"] is work.part_lse
    assert got["out"] is work.out and got["lse"] is work.lse and got["attn_sink"] is kw.get("attn_sink")
    assert "direct" not in got


def _recorded(monkeypatch, **over):
    monkeypatch.setattr(wgmma, "require_sm90", lambda q, name: None)
    kw = build_case(batch=2, heads=20, topk=130, sink=True, seed=4).kwargs()
    out, lse = torch.empty(2, 1, 20, 512, dtype=torch.bfloat16), torch.empty(2, 20, 1)
    args = dict(q=kw["q"], cache=kw["cache"], indices=kw["indices"], topk_length=None,
                part_out=torch.empty(2, 20, 3, 512), part_lse=torch.empty(2, 20, 3), split_offset=0, num_splits=3,
                tokens_per_split=64, sm_scale=0.1, out=out, lse=lse, attn_sink=kw["attn_sink"])
    args.update(over)
    with common.capture_launches() as records:
        registry.get(CLUSTER).launch(**args)
    ((_, grid, launch_args),) = records
    return grid, launch_args, out, lse, kw


def test_the_launch_is_one_cluster_per_query_head_group(monkeypatch):
    grid, args, out, lse, kw = _recorded(monkeypatch)
    assert grid == (1, 2, 2)  # x: one cluster of 3 splits; y: 20 heads in groups of 16; z: the queries
    assert args["CLUSTER"] == 3 and args["out_ptr"] is out and args["lse_ptr"] is lse
    assert args["sink_ptr"] is kw["attn_sink"] and args["HAS_SINK"] is True and args["DIRECT"] is False


@pytest.mark.parametrize("over, match", [
    (dict(split_offset=1), "offset 1"),
    (dict(num_splits=2), "2 splits of 3"),
    (dict(num_splits=9, part_lse=torch.empty(2, 20, 9), part_out=torch.empty(2, 20, 9, 512)), "1..8"),
], ids=["offset", "not-every-split", "over-eight"])
def test_a_cluster_launch_that_is_not_the_whole_call_is_refused(monkeypatch, over, match):
    with pytest.raises(ValueError, match=match):
        _recorded(monkeypatch, **over)


def test_the_other_wgmma_rungs_launch_as_before(monkeypatch):
    monkeypatch.setattr(wgmma, "require_sm90", lambda q, name: None)
    kw = build_case(batch=2, heads=20, topk=130, seed=4).kwargs()
    part_lse = torch.empty(2, 20, 3)
    with common.capture_launches() as records:
        registry.get("wgmma_f16_2cta").launch(q=kw["q"], cache=kw["cache"], indices=kw["indices"], topk_length=None,
                                              part_out=torch.empty(2, 20, 3, 512), part_lse=part_lse, split_offset=0,
                                              num_splits=3, tokens_per_split=64, sm_scale=0.1)
    ((_, grid, args),) = records
    assert grid == (2, 3, 2) and args["CLUSTER"] == 0 and args["out_ptr"] is args["part_out_ptr"]


class _Compiled:
    def __init__(self):
        self.packed_metadata = (8, 1, 88192)


class _Kernel:
    """A stand-in JIT kernel: warm-up returns its one compiled object; a launch records the metadata it would use."""

    def __init__(self):
        self.compiled, self.launched = _Compiled(), []

    def run(self, grid, warmup, **args):
        assert warmup
        return self.compiled

    def __getitem__(self, grid):
        return lambda **args: self.launched.append((grid, self.compiled.packed_metadata))


@pytest.mark.parametrize("cluster", [0, 3])
def test_both_paths_launch_a_cluster_kernel_as_clusters(cluster):
    """common.launch (the plain path) and plan.compile_launch (a plan's) give a CLUSTER launch's compiled kernel
    num_ctas = CLUSTER, which Triton's launcher turns into clusters; other launches keep 1."""
    k = _Kernel()
    common.launch(k, (1, 2, 3), dict(CLUSTER=cluster, x=1))
    assert k.launched == [((1, 2, 3), (8, cluster or 1, 88192))]
    k2 = _Kernel()
    assert plan_mod.compile_launch(k2, (1, 2, 3), dict(CLUSTER=cluster)).packed_metadata == (8, cluster or 1, 88192)


# ------------------------------------------------------------------------------------------------ GPU

CASES = [pytest.param(e, id=e.id) for e in CATALOGUE]


def _sm90():
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("a Gluon kernel for sm_90")


@pytest.mark.gpu
@pytest.mark.parametrize("entry", CASES)
def test_the_merge_in_the_cluster_is_the_combine(entry):
    """Every catalogue case (sinks finite and -inf, NaN in unselected and selected tokens, all-invalid queries,
    topk_length, two scopes, odd pages): rung 27 against rung 12, the same partial kernel whose splits the combine
    kernel merges, within one bf16 rounding (the two sum the splits in their own orders), NaN where it has NaN, and
    against the fp32 reference by the check's measure."""
    _sm90()
    from workbench.decode import sparse_mla_decode
    case = entry.build("cuda")
    out, lse = sparse_mla_decode(**case.kwargs(), impl=CLUSTER)
    ref_out, ref_lse = sparse_mla_decode(**case.kwargs(), impl="wgmma_f16_2cta")
    assert torch.equal(out.isnan(), ref_out.isnan()) and torch.equal(lse.isnan(), ref_lse.isnan())
    finite = ~ref_out.isnan()
    torch.testing.assert_close(out.float()[finite], ref_out.float()[finite], rtol=2 ** -7, atol=1e-6)
    torch.testing.assert_close(lse, ref_lse, rtol=1e-6, atol=1e-6, equal_nan=True)
    gold_out, gold_lse = sparse_mla_decode(**case.kwargs(), impl="reference")
    assert compare(out, lse, gold_out, gold_lse)["passed"]


@pytest.mark.gpu
@pytest.mark.parametrize("batch, heads, topk", [(1, 64, 512), (1, 16, 2048), (2, 128, 1024)],
                         ids=["b1-h64-k512", "b1-h16-k2048", "b2-h128-k1024"])
def test_at_a_benchmark_shape(batch, heads, topk):
    """Whole clusters of 8 splits (and, at h128, 8 head groups of clusters)."""
    _sm90()
    from workbench.decode import sparse_mla_decode
    kw = build_case(batch=batch, heads=heads, topk=topk, block_size=256, sink=True, seed=2, device="cuda").kwargs()
    out, lse = sparse_mla_decode(**kw, impl=CLUSTER)
    ref_out, ref_lse = sparse_mla_decode(**kw, impl="reference")
    assert compare(out, lse, ref_out, ref_lse)["passed"]


@pytest.mark.parametrize("output_slots", [False, True], ids=["plan_decode", "plain-path"])
def test_a_plan_binds_the_cluster_launch(monkeypatch, output_slots):
    """A plan of a call of 3 splits (its launch recorded, not run): one launch, the partials plan buffers, out and
    lse the call's (plan buffers, or the per-call output slots), the sink the user's, and CLUSTER 3 in the launch
    the plan compiles (plan.compile_launch makes it a cluster launch)."""
    monkeypatch.setattr(wgmma, "require_sm90", lambda q, name: None)
    case = build_case(batch=1, s_q=2, heads=16, topk=130, sink=True, seed=7)
    user = {name: None for name in decode.INPUT_NAMES}
    user.update({k: v for k, v in case.kwargs().items() if k in user})
    plan = plan_mod.build_plan(user, sm_scale=case.sm_scale, impl=CLUSTER, config=None, output_slots=output_slots)
    (launch,) = plan.launches
    args, slots = launch.fixed, {name: index for name, index, _ in launch.slots}
    assert args["CLUSTER"] == 3 and args["s_total"] == 3 and args["DIRECT"] is False and args["HAS_SINK"] is True
    assert launch.grid[0] == 1 and args["part_lse_ptr"] is plan.part_lse and args["part_out_ptr"] is plan.part_out
    assert slots["sink_ptr"] == plan_mod.INPUT_INDEX["attn_sink"]
    if output_slots:
        assert slots["out_ptr"] == plan_mod.INPUT_INDEX["out"] and slots["lse_ptr"] == plan_mod.INPUT_INDEX["lse"]
    else:
        assert args["out_ptr"] is plan.out and args["lse_ptr"] is plan.lse
