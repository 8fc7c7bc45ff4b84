"""Cost isolation (workbench.bench.isolate): the variant names, their LEAVE_OUT bits, which kernels take them, and how
the bench finds them (the timings themselves need an sm_90 GPU: the isolate sweep, data/*_isolate.csv)."""
import pytest

from workbench import registry
from workbench.bench import isolate, providers
from workbench.kernels.gluon_common import LEAVE_OUT_BITS


def test_each_variant_drops_the_stages_it_names():
    assert LEAVE_OUT_BITS == {"loads": 1, "dequant": 2, "softmax": 4, "qk": 8, "pv": 16}
    assert isolate.leave_out_bits(isolate.VARIANTS["loads_only"]) == 2 | 4 | 8  # gathers, K stores and PV stay
    assert isolate.leave_out_bits(isolate.VARIANTS["gather_dequant"]) == 4 | 8 | 16  # no MMA, no softmax
    assert isolate.leave_out_bits(isolate.VARIANTS["no_pv"]) == 16
    assert isolate.leave_out_bits(isolate.VARIANTS["no_combine"]) == 0  # the partial kernel untouched
    with pytest.raises(ValueError, match="expected some of"):
        isolate.leave_out_bits(("pv", "epilogue"))


def test_provider_names_split_into_a_decode_and_a_variant():
    assert isolate.split_provider("wgmma_ws~no_pv") == ("wgmma_ws", "no_pv")
    assert isolate.split_provider("auto") is None
    with pytest.raises(ValueError, match="after '~'"):
        isolate.split_provider("auto~no_epilogue")
    assert "auto~gather_dequant" in providers.provider_names()
    assert providers.base_impl("wgmma_ws~no_pv") == "wgmma_ws" and providers.base_impl("auto~no_qk") == "auto"


def test_only_the_gluon_partial_kernels_take_leave_out():
    assert isolate.is_gluon(registry.get("wgmma_ws")) and isolate.is_gluon(registry.get("wgmma_f16_2cta"))
    assert isolate.is_gluon(registry.get("wgmma_ws_h64"))
    assert not isolate.is_gluon(registry.get("tile512")) and not isolate.is_gluon(registry.get("simt"))


def test_every_split_kernel_with_a_leave_out_switch_is_isolatable():
    """A rung whose jit function takes LEAVE_OUT is one the isolate sweep can time, and no other is."""
    import inspect
    for name in registry.names("split"):
        spec = registry.get(name)
        fn = getattr(spec.jit, "fn", spec.jit)
        takes = "LEAVE_OUT" in inspect.signature(fn).parameters
        assert isolate.is_gluon(spec) == takes, name


def test_an_isolation_provider_needs_the_gpu(monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on CI, also where a GPU is present
    with pytest.raises(providers.Skip, match="sm_90"):
        providers.make_provider("wgmma_ws~no_loads")
