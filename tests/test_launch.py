"""The autotuned launch paths (which the interpreter never takes) pass exactly the kernel's arguments."""
import pytest

import workbench as wb
from workbench.kernels import combine as combine_mod
from workbench import registry


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


def _python_function(jit):
    """The decorated Python function under an autotuner and a JIT or interpreter wrapper."""
    while hasattr(jit, "fn"):
        jit = jit.fn
    return jit


@pytest.mark.parametrize("impl", [n for n in registry.names("split", "fused") if registry.get(n).interpretable])
def test_autotuned_launch_leaves_config_keys_to_the_autotuner(monkeypatch, impl):
    """Every registered kernel's autotuned path passes all arguments but the tuned ones (by keyword)."""
    import sys

    import workbench.decode as dec
    spec = registry.get(impl)
    recorders = {}
    for jit in (spec.jit, combine_mod.combine_kernel):
        py = _python_function(jit)
        mod, name = sys.modules[py.__module__], py.__name__
        rec = _Recorder(jit)
        recorders[name] = rec
        monkeypatch.setattr(mod, name, rec)
        monkeypatch.setattr(mod, "INTERPRET", False, raising=False)
    monkeypatch.setattr(dec, "INTERPRET", False)
    case = wb.build_case(batch=2, heads=20, topk=40, extra_topk=8, sink=True, topk_length=True)
    monkeypatch.setattr(dec, "_check_runnable", lambda q, impl: None)
    wb.sparse_mla_decode(**case.kwargs(), impl=impl)
    rec = recorders[_python_function(spec.jit).__name__]
    configs = spec.jit.configs
    assert rec.calls, "kernel was not launched"
    for kwargs in rec.calls:
        tuned = set().union(*(c.kwargs for c in configs))
        assert not tuned & set(kwargs), f"launch passes autotuned keys {tuned & set(kwargs)}"
        assert set(kwargs) | tuned == set(rec.kernel.fn.arg_names), "launch must pass every other argument"
