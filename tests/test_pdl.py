"""The combine as a programmatic dependent launch (decode.combine_pdl): the rule, the override the bench's "+pdl"
and "+serial" providers use, what reaches the launch, and on the GPU that a PDL combine reads finished partials."""
import dataclasses
import re
import threading

import pytest
import torch

import workbench as wb
from workbench import decode, registry
from workbench.bench import providers
from workbench.format.cases import build_case
from workbench.kernels.common import capture_launches
from workbench.lab.resources import without_interpreter
from workbench.bench.sweeps import BenchShape


@pytest.fixture
def on_gpu_path(monkeypatch):
    """combine_pdl as on the GPU (the interpreter never launches PDL)."""
    monkeypatch.setattr(decode, "INTERPRET", False)


@pytest.mark.parametrize("s_total, expected", [(1, True), (decode.PDL_MAX_SPLITS, True),
                                               (decode.PDL_MAX_SPLITS + 1, False), (64, False)],
                         ids=["1-split", "at-the-limit", "one-over", "64-splits"])
def test_pdl_up_to_the_split_limit_for_kernels_that_ask(on_gpu_path, s_total, expected):
    assert decode.combine_pdl(registry.get("wgmma_f16"), s_total) is expected
    assert decode.combine_pdl(registry.get("tile512"), s_total) is False  # a Triton rung does not ask
    assert decode.combine_pdl(registry.get("simt"), s_total) is False     # fused: no combine


def test_the_override_wins_in_its_thread_only(on_gpu_path):
    spec = registry.get("wgmma_f16_2cta")
    seen = {}
    with decode.combine_launch(True):
        assert decode.combine_pdl(spec, 64) is True
        with decode.combine_launch(False):
            assert decode.combine_pdl(spec, 1) is False
        assert decode.combine_pdl(spec, 64) is True  # the outer override is back
        t = threading.Thread(target=lambda: seen.update(other=decode.combine_pdl(spec, 64)))
        t.start()
        t.join()
    assert seen["other"] is False  # another thread follows the rule
    assert decode.combine_pdl(spec, 64) is False and decode.combine_pdl(spec, 2) is True
    assert decode.combine_pdl(registry.get("tile512"), 2) is False  # the override only applies to kernels that ask


def _combine_stage_pdl(spec, case, s_total_scopes=1):
    """The pdl keyword decode.launch_stages gives the combine launch for ``spec`` on ``case``."""
    kw = case.kwargs()
    scopes = decode.decode_scopes(kw["cache"], kw["indices"], None)
    work = decode.allocate_workspace(spec, kw["q"], scopes)
    stages = decode.launch_stages(spec, q=kw["q"], scopes=scopes, attn_sink=None, sm_scale=0.1, config=None,
                                  work=work)
    return stages[-1].run.keywords["pdl"], work.part_lse.shape[-1]


@pytest.mark.parametrize("interpreted", [True, False], ids=["interpreter", "gpu-path"])
def test_launch_stages_hand_the_rule_to_the_combine(monkeypatch, interpreted):
    """A kernel that asks for PDL (tile512 made to ask, so it runs here): the combine stage gets the rule's answer
    on the GPU path, and never PDL under the interpreter, whatever the override."""
    monkeypatch.setattr(decode, "INTERPRET", interpreted)
    spec = dataclasses.replace(registry.get("tile512"), pdl=True)
    case = build_case(batch=2, heads=16, topk=64, seed=3)
    pdl, s_total = _combine_stage_pdl(spec, case)
    assert s_total <= decode.PDL_MAX_SPLITS and pdl is (not interpreted)
    with decode.combine_launch(False):
        assert _combine_stage_pdl(spec, case)[0] is False
    with decode.combine_launch(True):
        assert _combine_stage_pdl(spec, case)[0] is (not interpreted)
    assert _combine_stage_pdl(registry.get("tile512"), case)[0] is False  # the registered tile512 does not ask


def test_interpreted_decodes_launch_the_combine_plainly():
    """What reaches the launch under the interpreter (CI): launch_pdl and the kernel's PDL switch both False."""
    case = build_case(batch=2, heads=16, topk=64, seed=3)
    with decode.combine_launch(True), capture_launches() as records:
        wb.sparse_mla_decode(**case.kwargs(), impl="tile512")
    combine_args = [args for kernel, _, args in records if "part_out_ptr" in args and "out_ptr" in args]
    assert len(combine_args) == 1
    assert combine_args[0]["launch_pdl"] is False and combine_args[0]["PDL"] is False


def test_the_pdl_combine_waits_before_it_touches_memory():
    """sm_90 PTX of the combine as PDL launches it: griddepcontrol.wait before its first global load or store
    (every read of the partials and every write of out and lse); without PDL there is no wait at all."""
    code = ("from workbench.lab.resources import compiled_ptx\n"
            "print(compiled_ptx('combine', 'sm_90', {'num_warps': 1}, PDL=True))\n"
            "print('----')\n"
            "print(compiled_ptx('combine', 'sm_90', {'num_warps': 1}, PDL=False))")
    with_pdl, plain = without_interpreter(code).split("----")
    mem = [ln.split("//")[0] for ln in with_pdl.splitlines() if re.search(r"\b(ld|st)\.global|griddepcontrol", ln)]
    assert "griddepcontrol.wait" in mem[0], mem[:3]
    assert sum("griddepcontrol" in m for m in mem) == 1 and "griddepcontrol" not in plain


@pytest.mark.parametrize("name, impl, pdl", [("auto+pdl", "auto", True), ("wgmma_f16+serial", "wgmma_f16", False)],
                         ids=["auto-pdl", "f16-serial"])
def test_combine_launch_providers_name_their_decode(name, impl, pdl):
    assert providers.base_impl(name) == impl
    shape = BenchShape(64, 16, 2048)
    assert providers.kernel_of(name, shape) == providers.kernel_of(impl, shape)
    if impl == "auto":
        assert name in providers.provider_names()
    try:
        p = providers.make_provider(name)
    except providers.Skip:  # no GPU and no interpreter: the name still parses (above)
        return
    assert isinstance(p, providers.CombineLaunchProvider) and p.name == name and p.pdl is pdl


@pytest.mark.parametrize("name", ["nosuchkernel+serial", "tile512+pdl", "reference+serial", "auto+plan+pdl"],
                         ids=["unknown", "triton-rung", "reference", "stacked"])
def test_a_launch_suffix_on_a_decode_without_pdl_is_refused(name):
    """Only decodes that can launch a PDL combine take the suffix (else the row would name a launch that never
    happened); suffixes do not stack."""
    with pytest.raises(ValueError, match="provider"):
        providers.make_provider(name)


@pytest.mark.interpreter
def test_auto_pdl_skips_where_auto_runs_a_kernel_without_pdl():
    """Under the interpreter auto runs tile512: the "+pdl" provider says so instead of timing a plain decode."""
    p = providers.make_provider("auto+pdl")
    kw = build_case(batch=2, heads=16, topk=64, seed=3).kwargs()
    with pytest.raises(providers.Skip, match="tile512"):
        p.prepare(kw)


# ---- GPU ----------------------------------------------------------------------------------------------------

def _gluon_rungs():
    return [n for n in registry.names("split") if registry.get(n).pdl]


@pytest.mark.gpu
@pytest.mark.parametrize("scopes", [dict(), dict(extra_topk=512, extra_block_size=64)], ids=["one-scope", "two-scopes"])
@pytest.mark.parametrize("impl", _gluon_rungs())
def test_gpu_pdl_combine_reads_the_partials_of_its_own_call(impl, scopes):
    """A plan reuses its split scratch: a PDL combine that did not wait for its partial launch (with two scopes,
    the last of two) would merge the previous call's partials. Two calls through one PDL plan, eager and replayed
    in a graph, equal the serial decode of the second input bit for bit; the compiled combine carries launch_pdl."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip(f"{impl} is an sm_90 (Gluon) kernel")
    shape = dict(batch=4, heads=16, topk=1024, block_size=256, **scopes)
    first = build_case(**shape, seed=11, device="cuda").kwargs()
    second = build_case(**shape, seed=12, device="cuda").kwargs()
    with decode.combine_launch(False):
        ref_out, ref_lse = wb.sparse_mla_decode(**second, impl=impl)
    with decode.combine_launch(True):
        plan = wb.plan_decode(**first, impl=impl)
    assert plan.compiled and plan._compiled[-1][-1].metadata.launch_pdl  # the combine, as the C launcher sees it
    assert not any(c[-1].metadata.launch_pdl for c in plan._compiled[:-1])  # the partials: ordinary launches
    wb.sparse_mla_decode(**first, plan=plan)
    out, lse = wb.sparse_mla_decode(**second, plan=plan)
    torch.cuda.synchronize()
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        wb.sparse_mla_decode(**first, plan=plan)
        g_out, g_lse = wb.sparse_mla_decode(**second, plan=plan)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(g_out, ref_out) and torch.equal(g_lse, ref_lse)
