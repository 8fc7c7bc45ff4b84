"""The combine as a programmatic dependent launch (decode.combine_pdl): the rule, the override the bench's "+pdl"
and "+serial" providers use, what reaches the launch, and on the GPU that a PDL combine reads finished partials."""
import threading

import pytest
import torch

import workbench as wb
from workbench import decode, providers, registry
from workbench.cases import build_case
from workbench.kernels.common import capture_launches
from workbench.sweeps import BenchShape


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


def test_interpreted_decodes_launch_the_combine_plainly():
    """Under the interpreter (CI), whatever the override: launch_pdl is False and the kernel waits on nothing."""
    case = build_case(batch=2, heads=16, topk=64, seed=3)
    with decode.combine_launch(True), capture_launches() as records:
        wb.sparse_mla_decode(**case.kwargs(), impl="tile512")
    combine_args = [args for kernel, _, args in records if "part_out_ptr" in args and "out_ptr" in args]
    assert len(combine_args) == 1
    assert combine_args[0]["launch_pdl"] is False and combine_args[0]["PDL"] is False


@pytest.mark.parametrize("name, impl, pdl", [("auto+pdl", "auto", True), ("wgmma_f16+serial", "wgmma_f16", False)],
                         ids=["auto-pdl", "f16-serial"])
def test_combine_launch_providers_name_their_decode(name, impl, pdl):
    assert providers.base_impl(name) == impl
    shape = BenchShape(64, 16, 2048)
    assert providers.kernel_of(name, shape) == providers.kernel_of(impl, shape)
    try:
        p = providers.make_provider(name)
    except providers.Skip:  # no GPU and no interpreter: the name still parses (above)
        return
    assert isinstance(p, providers.CombineLaunchProvider) and p.name == name and p.pdl is pdl


def test_an_unknown_decode_with_a_launch_suffix_is_refused():
    with pytest.raises(ValueError, match="provider"):
        providers.make_provider("nosuchkernel+serial")


# ---- GPU ----------------------------------------------------------------------------------------------------

def _gluon_rungs():
    return [n for n in registry.names("split") if registry.get(n).pdl]


@pytest.mark.gpu
@pytest.mark.parametrize("impl", _gluon_rungs())
def test_gpu_pdl_combine_reads_the_partials_of_its_own_call(impl):
    """A plan reuses its split scratch: a PDL combine that did not wait for its partial launch would merge the
    previous call's partials. Two calls through one PDL plan (eager and replayed in a graph) equal the serial
    decode of the second input, bit for bit."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip(f"{impl} is an sm_90 (Gluon) kernel")
    first = build_case(batch=4, heads=16, topk=256, seed=11, device="cuda").kwargs()
    second = build_case(batch=4, heads=16, topk=256, seed=12, device="cuda").kwargs()
    with decode.combine_launch(False):
        ref_out, ref_lse = wb.sparse_mla_decode(**second, impl=impl)
    with decode.combine_launch(True):
        plan = wb.plan_decode(**first, impl=impl)
    assert plan.launches[-1].fixed.get("launch_pdl") is True
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
