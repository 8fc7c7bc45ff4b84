"""A call of one split with no combine (``KernelSpec.direct``): when the decode takes that path, what reaches the
launch, and on the GPU that every Gluon rung writes out and lse bit for bit as its own partial-and-combine path
does (the combine kernel is the independent reference: the same partial kernel, its fp32 partials merged apart)."""
import dataclasses

import pytest
import torch

from workbench import decode, registry
from workbench.bench import isolate
from workbench.format.cases import CATALOGUE, build_case
from workbench.format.layout import MODEL1


def _recording_spec(calls, direct=True):
    """tile512's spec with a launch that only records its keywords (and direct as asked)."""
    return dataclasses.replace(registry.get("tile512"), direct=direct, launch=lambda **kw: calls.append(kw))


def call_scopes(kw):
    """decode's KV scopes of a call's keywords (the extra one where given)."""
    return decode.decode_scopes(kw["cache"], kw["indices"], kw.get("topk_length"), kw.get("extra_cache"),
                                kw.get("extra_indices"), kw.get("extra_topk_length"))


def decode_stages(spec, kw):
    """decode's workspace and launch stages for a call's keywords (its sm_scale, or decode's default)."""
    scopes = call_scopes(kw)
    work = decode.allocate_workspace(spec, kw["q"], scopes)
    sm_scale = MODEL1.d ** -0.5 if kw.get("sm_scale") is None else float(kw["sm_scale"])
    return work, decode.launch_stages(spec, q=kw["q"], scopes=scopes, attn_sink=kw.get("attn_sink"),
                                      sm_scale=sm_scale, config=None, work=work)


def _stages(spec, case, attn_sink=None):
    return decode_stages(spec, {**case.kwargs(), "attn_sink": attn_sink, "sm_scale": 0.1})


def test_one_split_runs_one_launch_into_out_and_lse():
    """topk 48 in tile512's 16-token granule would be 3 splits; at a granule of 64 it is one split in all."""
    calls = []
    spec = dataclasses.replace(_recording_spec(calls), split_granule=64)
    case = build_case(batch=2, s_q=2, heads=16, topk=48, seed=5)
    sink = torch.linspace(-1.0, 1.0, 32)[::2]  # strided: the launch gets it as it is
    work, stages = _stages(spec, case, attn_sink=sink)
    assert work.direct and work.part_out is None and work.part_lse is None
    assert len(stages) == 1 and stages[0].inputs == ("q", "cache", "indices", "topk_length", "attn_sink")
    stages[0].run()
    (kw,) = calls
    assert kw["part_out"] is work.out and kw["part_lse"] is work.lse and kw["attn_sink"] is sink
    assert kw["direct"] is True and kw["num_splits"] == 1 and kw["split_offset"] == 0
    assert kw["tokens_per_split"] == 64


@pytest.mark.parametrize("what", ["two-splits", "extra-scope", "kernel-without-direct"])
def test_otherwise_the_partials_and_the_combine(what):
    calls = []
    spec = _recording_spec(calls, direct=what != "kernel-without-direct")
    spec = dataclasses.replace(spec, split_granule=64 if what != "two-splits" else 16)
    extra = dict(extra_topk=8, extra_block_size=2) if what == "extra-scope" else {}
    case = build_case(batch=2, heads=16, topk=48, seed=5, **extra)
    work, stages = _stages(spec, case)
    assert not work.direct and work.part_lse.shape[-1] == sum(s.num_splits for s in work.splits)
    assert (work.part_lse.shape[-1] == 1) is (what == "kernel-without-direct")
    assert len(stages) == len(work.splits) + 1  # a partial per scope, then the combine
    for stage in stages[:-1]:
        stage.run()
    assert all("direct" not in kw and kw["part_lse"] is work.part_lse for kw in calls)


def test_the_gluon_rungs_write_directly_and_the_triton_ones_do_not():
    direct = {n for n in registry.names("split") if registry.get(n).direct}
    portable = {"portable_ws", "portable_ws_h32q", "portable_ws_h32t", "portable_ws_h32p", "portable_ws_h32f"}
    assert direct == {n for n in registry.names("split") if isolate.is_gluon(registry.get(n))} | portable
    assert {"wgmma_ws", "wgmma_ws_h64", "wgmma_f16"} <= direct
    assert not direct & {"tile512", "mma"}


def test_no_combine_of_a_direct_call_keeps_its_one_launch(monkeypatch):
    """isolate's "no_combine" drops the last stage only when there is a combine."""
    calls = []
    spec = dataclasses.replace(_recording_spec(calls), split_granule=64)
    monkeypatch.setattr(isolate, "is_gluon", lambda s: True)
    monkeypatch.setattr(decode, "resolve_call", lambda **kw: (spec, 0.1), raising=True)
    case = build_case(batch=2, heads=16, topk=48, seed=5)
    isolate.isolated_launches(case.kwargs(), impl="tile512", variant="no_combine")()
    assert len(calls) == 1 and calls[0]["direct"] is True


def test_the_pdl_ab_skips_a_call_with_no_combine(monkeypatch):
    """The bench's "+pdl" / "+serial" pair times nothing different where a direct kernel runs one split."""
    from workbench.bench import providers
    spec = registry.get("wgmma_ws_h64")  # direct, and asks for PDL
    monkeypatch.setattr(decode, "resolve_call", lambda **kw: (spec, 0.1))
    p = providers.CombineLaunchProvider("auto", "+pdl")
    with pytest.raises(providers.Skip, match="one split"):
        p.prepare(build_case(batch=2, heads=16, topk=48, seed=5).kwargs())  # 48 tokens: one 64-token split
    # 200 tokens on the interpreter's 4 SMs: 2 queries want 2 splits each, of 128 tokens
    assert callable(p.prepare(build_case(batch=2, heads=16, topk=200, seed=5).kwargs()))


@pytest.mark.parametrize("output_slots", [False, True], ids=["plan_decode", "plain-path"])
@pytest.mark.parametrize("sink", [False, True], ids=["no-sink", "sink"])
@pytest.mark.parametrize("impl", ["wgmma_ws", "wgmma_ws_h64", "wgmma_f16", "wgmma_ws_bal", "portable_ws",
                                  "portable_ws_h32q", "portable_ws_h32t", "portable_ws_h32p"])
def test_a_plan_binds_the_direct_launch(monkeypatch, impl, sink, output_slots):
    """A plan of a one-split call on a Gluon rung (its launch recorded, not run: the GPU check patched away):
    one launch, whose part_out and part_lse are the call's out and lse (plan buffers, or the per-call output slots),
    whose sink is the user's attn_sink (else lse stands in, unread), with one split (32 tokens: one split at the
    portable rungs' granule of 32 too)."""
    import importlib

    from workbench import plan as plan_mod
    from workbench.kernels import portable_ws
    jit = registry.get(impl).jit
    module = importlib.import_module(getattr(jit, "fn", jit).__module__)
    if impl.startswith("portable"):
        monkeypatch.setattr(portable_ws, "require_ws_gpu", lambda q, name: None)
    else:
        monkeypatch.setattr(module, "require_sm90", lambda q, name: None)
    case = build_case(batch=2, s_q=2, heads=16, topk=32, sink=sink, seed=7)
    user = {name: None for name in decode.INPUT_NAMES}
    user.update({k: v for k, v in case.kwargs().items() if k in user})
    plan = plan_mod.build_plan(user, sm_scale=case.sm_scale, impl=impl, config=None, output_slots=output_slots)
    (launch,) = plan.launches
    args = launch.fixed
    slots = {name: (index, view) for name, index, view in launch.slots}
    assert plan.part_out is None and plan.part_lse is None and args["s_total"] == 1 and args["DIRECT"] is True and args["HAS_SINK"] is sink
    assert launch.grid[1] == 1
    lse_slot = plan_mod.INPUT_INDEX["lse"] if output_slots else None
    if output_slots:
        assert slots["part_out_ptr"][0] == plan_mod.INPUT_INDEX["out"] and slots["part_lse_ptr"][0] == lse_slot
    else:
        assert args["part_out_ptr"] is plan.out and args["part_lse_ptr"] is plan.lse
    if sink:
        assert slots["sink_ptr"][0] == plan_mod.INPUT_INDEX["attn_sink"]
    elif output_slots:
        assert slots["sink_ptr"][0] == lse_slot
    else:
        assert args["sink_ptr"] is plan.lse


# ------------------------------------------------------------------------------------------------ GPU

def _bits(t):
    return t.contiguous().view(torch.int16 if t.dtype == torch.bfloat16 else torch.int32)


def run_decode(spec, kw):
    """One decode through decode's own pieces: (workspace, out, lse)."""
    work, stages = decode_stages(spec, kw)
    for stage in stages:
        stage.run()
    return work, work.out, work.lse


def _assert_direct_is_the_combine(spec, case):
    """Kernel ``spec`` (a name or a KernelSpec) runs ``case`` as one split with no combine, bit for bit as the same
    kernel with its combine (up to the sign of a zero, which the combine's sum makes +0: none in these cases)."""
    spec = registry.get(spec) if isinstance(spec, str) else spec
    work, out, lse = run_decode(spec, case.kwargs())
    assert work.direct
    _, ref_out, ref_lse = run_decode(dataclasses.replace(spec, direct=False), case.kwargs())
    assert torch.equal(_bits(out), _bits(ref_out)) and torch.equal(_bits(lse), _bits(ref_lse))


# one-scope catalogue entries of at most 64 tokens, one split in all at a granule of 64 (the portable rungs, whose
# granule is 32, are planned at 64 here: the granule moves only the plan, not the kernel): finite and -inf sinks,
# s_q 2 and 3, topk_length, all-invalid queries, scale bytes outside the f16 window (the bf16 second pass), NaN in
# unselected pages
ONE_SPLIT_TOKENS = 64
GLUON = [n for n in registry.names("split") if registry.get(n).direct]
ONE_SPLIT = [pytest.param(n, e, id=f"{n}-{e.id}") for n in GLUON for e in CATALOGUE
             if e.spec["topk"] <= ONE_SPLIT_TOKENS and not e.spec.get("extra_topk")]


@pytest.mark.gpu
@pytest.mark.parametrize("impl, entry", ONE_SPLIT)
def test_direct_is_the_combine_bit_for_bit(impl, entry):
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip(f"{impl} is a Gluon kernel for sm_90")
    spec = registry.get(impl)
    spec = dataclasses.replace(spec, split_granule=max(ONE_SPLIT_TOKENS, spec.split_granule))
    _assert_direct_is_the_combine(spec, entry.build("cuda"))


@pytest.mark.gpu
@pytest.mark.parametrize("impl, heads, batch", [("wgmma_ws", 16, 128), ("wgmma_ws_h64", 128, 64),
                                                ("portable_ws_h32t", 64, 128), ("portable_ws", 16, 256)],
                         ids=["ws-b128-h16", "ws_h64-b64-h128", "h32t-b128-h64", "portable_ws-b256-h16"])
def test_direct_at_a_benchmark_shape(impl, heads, batch):
    """The shapes the change is for: one split because the calls fill the SMs (topk 2048, pages of 256)."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip(f"{impl} is a Gluon kernel for sm_90")
    _assert_direct_is_the_combine(impl, build_case(batch=batch, heads=heads, topk=2048, block_size=256, sink=True,
                                                   seed=11, device="cuda"))


def test_a_direct_launch_of_more_than_one_split_is_refused():
    """A direct launch writes the call's out and lse as one split: with two, each split would overwrite the other's
    rows, so every Gluon launcher's epilogue arguments refuse it (and the non-direct path takes any count)."""
    from workbench.kernels import gluon_common
    lse = torch.zeros(2, 4, 1)
    assert gluon_common.epilogue_args(part_lse=lse, direct=True, attn_sink=None, num_splits=1)["DIRECT"] is True
    assert gluon_common.epilogue_args(part_lse=lse, direct=False, attn_sink=None, num_splits=3)["DIRECT"] is False
    with pytest.raises(ValueError, match="num_splits=2"):
        gluon_common.epilogue_args(part_lse=lse, direct=True, attn_sink=None, num_splits=2)


def test_rung_15_gives_its_producer_more_registers_only_where_its_loop_spills():
    """wgmma_ws_h64.producer_regs: the builds whose producer loop spills at 128 (one split with a sink; two scopes
    joined) get 144; every other keeps the rung's switches, and the block's 65,536 registers still leave the softmax
    warpgroup 200 or more. (tests/test_joined_scopes.py records the launcher applying it; the sink and joined
    explore rows time those builds.)"""
    from workbench.kernels import wgmma_ws_h64 as ws
    assert ws.producer_regs(True, True) == 144
    assert {ws.producer_regs(d, s, True) for d in (True, False) for s in (True, False)} == {144}
    assert {ws.producer_regs(d, s) for d, s in ((True, False), (False, True), (False, False))} == {
        ws.SWITCHES["PRODUCER_REGS"]}
    # the block's registers still fit: 4 warps each of softmax (what is left), PV and producer
    left = 65536 - 128 * (ws.SWITCHES["PV_REGS"] + ws.producer_regs(True, True))
    assert left // 128 >= 200 and ws.producer_regs(True, True) % 8 == 0
