"""The autotuned launch paths (which the interpreter never takes) pass exactly the kernel's arguments."""
import pytest

import workbench as wb
from workbench.kernels import combine as combine_mod
from workbench.kernels import mma as mma_mod
from workbench.kernels import simt as simt_mod


class _Recorder:
    def __init__(self, kernel):
        self.kernel, self.calls = kernel, []

    def __getitem__(self, grid):
        def launch(**kwargs):
            self.calls.append(kwargs)
        return launch

    @property
    def fn(self):
        return self


@pytest.mark.parametrize("impl", ["mma", "simt"])
def test_autotuned_launch_leaves_config_keys_to_the_autotuner(monkeypatch, impl):
    import workbench.decode as dec
    recorders = {}
    for mod, name in ((mma_mod, "mma_partial_kernel"), (simt_mod, "simt_kernel"), (combine_mod, "combine_kernel")):
        rec = _Recorder(getattr(mod, name))
        recorders[name] = rec
        monkeypatch.setattr(mod, name, rec)
        monkeypatch.setattr(mod, "INTERPRET", False, raising=False)
    monkeypatch.setattr(dec, "INTERPRET", False)
    case = wb.build_case(batch=2, heads=20, topk=40, extra_topk=8, sink=True, topk_length=True)
    monkeypatch.setattr(dec, "_check_runnable", lambda q, impl: None)
    wb.sparse_mla_decode(**case.kwargs(), impl=impl)
    kernel = "mma_partial_kernel" if impl == "mma" else "simt_kernel"
    rec = recorders[kernel]
    configs = mma_mod.MMA_CONFIGS if impl == "mma" else simt_mod.SIMT_CONFIGS
    assert rec.calls, "kernel was not launched"
    for kwargs in rec.calls:
        tuned = set().union(*(c.kwargs for c in configs))
        assert not tuned & set(kwargs), f"launch passes autotuned keys {tuned & set(kwargs)}"
        assert set(kwargs) | tuned == set(rec.kernel.fn.arg_names), "launch must pass every other argument"
