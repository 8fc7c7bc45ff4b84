"""scripts/explore.py's --spec-variant: a copy of a registered kernel with one KernelSpec field changed, for a
same-call A/B (the registry restored afterwards)."""
import argparse
import importlib.util
from pathlib import Path

import pytest

from workbench import decode, registry
from workbench.kernel_spec import unregister

_spec = importlib.util.spec_from_file_location("explore", Path(__file__).parents[1] / "scripts" / "explore.py")
explore = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(explore)


@pytest.fixture
def parser():
    p = argparse.ArgumentParser()
    p.error = lambda message: (_ for _ in ()).throw(ValueError(message))  # an error, not an exit
    yield p
    unregister("v_test")
    unregister("v_test2")


def test_an_integer_field_changes_the_plan_of_the_copy_only(parser):
    explore.register_spec_variant(parser, "v_test:portable_ws_h32t:split_block_h=32")
    base, copy = registry.get("portable_ws_h32t"), registry.get("v_test")
    assert copy.split_block_h == 32 and copy.rung is None and base.split_block_h is None
    # b64 h64 topk2048 on 132 SMs, one wave: 64 or 128 programs a split -> 2 splits or 1
    plans = [decode.spec_split_plans(s, queries=64, heads=64, topks=[2048], num_sms=132)[0].num_splits
             for s in (base, copy)]
    assert plans == [2, 1]


def test_a_boolean_field(parser):
    explore.register_spec_variant(parser, "v_test:wgmma_f16:two_scopes=0")
    assert registry.get("v_test").two_scopes is False and registry.get("wgmma_f16").two_scopes is True


def test_a_switch_reaches_the_launcher_and_chains(parser, monkeypatch):
    """switches.KEY=V: the copy's launcher passes the rung's switches with KEY set (a second variant on the first
    sets two); the base rung still passes its own."""
    from workbench.kernels import portable_ws_h32t
    seen = []
    monkeypatch.setattr(portable_ws_h32t, "launch_portable_partial", lambda **kw: seen.append(kw["switches"]))
    explore.register_spec_variant(parser, "v_test:portable_ws_h32f:switches.EARLY_PV=1")
    explore.register_spec_variant(parser, "v_test2:v_test:switches.NUM_BUFS=3")
    for name in ("portable_ws_h32f", "v_test", "v_test2"):
        registry.get(name).launch()
    base = dict(portable_ws_h32t.SWITCHES, F16=True)
    assert seen == [base, {**base, "EARLY_PV": 1}, {**base, "EARLY_PV": 1, "NUM_BUFS": 3}]
    assert registry.get("v_test2").fixed_meta == seen[2] and registry.get("portable_ws_h32f").fixed_meta == base


@pytest.mark.parametrize("text", ["v_test:portable_ws:rung=3", "v_test:portable_ws:split_granule=0",
                                  "v_test:portable_ws:split_waves=-1", "v_test:portable_ws:direct=2",
                                  "v_test:portable_ws:name=1", "portable_ws:portable_ws:direct=0",
                                  "v_test:no_such_kernel:direct=0", "v_test:portable_ws:switches.NUM_BUFS=-1",
                                  "v_test:wgmma_xchg:switches.X=1", "v_test:portable_ws:switches.1x=1"],
                         ids=["rung", "zero", "negative", "bool-2", "not-a-field", "name-taken", "no-base",
                              "switch-negative", "switch-no-switches", "switch-bad-key"])
def test_what_it_refuses(parser, text):
    with pytest.raises(ValueError, match="--spec-variant"):
        explore.register_spec_variant(parser, text)
    assert "v_test" not in registry.names()


def test_a_ws_variant_takes_the_kernels_defaulted_constexprs(parser, monkeypatch):
    """--ws-variant: wgmma_ws's fixed switches, and any constexpr its kernel gives a default (an A/B switch a patch
    adds: LEAVE_OUT at HEAD), reach its launcher; the two the launcher sets itself, and unknown names, are refused."""
    from workbench.kernels import wgmma_ws
    seen = []
    monkeypatch.setattr(wgmma_ws, "launch_ws_partial", lambda **kw: seen.append(kw))
    explore.register_ws_variant(parser, "v_test:NUM_BUFS=2,LEAVE_OUT=4")
    registry.get("v_test").launch()
    assert (seen[0]["NUM_BUFS"], seen[0]["LEAVE_OUT"], seen[0]["PRODUCER_WARPS"]) == (2, 4, 8)
    for text in ("v_test2:DIRECT=1", "v_test2:HAS_SINK=1", "v_test2:NO_SUCH=1", "v_test2:NUM_BUFS=x"):
        with pytest.raises(ValueError, match="--ws-variant"):
            explore.register_ws_variant(parser, text)
    assert "v_test2" not in registry.names()
