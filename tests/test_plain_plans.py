"""The plain path's plans (issue 22): ``sparse_mla_decode`` without ``plan=`` replays the plan of an earlier call
that matches it, returns new out and lse every call, equals the uncached plain path, and takes the plain path where
a plan cannot serve the call. Also: interpreted decodes from two threads at once (plan_decode's refusal of a
tensor sm_scale is in test_plan.py).

CPU tests run the real kernels under the interpreter on tiny cases; the compiled replay (GPU) is exercised with its
C launch stubbed. ``-m gpu`` runs the real compiled replay, streams and CUDA graph capture.
"""
import os
import subprocess
import sys
import threading
import timeit
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import workbench as wb
from workbench import decode
from workbench import plan as plan_mod
from workbench.kernels.common import capture_launches

ROOT = Path(__file__).resolve().parents[1]
PLANS = decode.PLAIN_PLANS
TINY = dict(batch=2, heads=4, topk=16, block_size=64)
# with a sink, topk_length and an extra scope of another page size: every optional input present
FULL = dict(TINY, sink=True, topk_length=True, extra_topk=16, extra_block_size=32, extra_topk_length=True)


def tiny(seed=0, device="cpu", **overrides):
    return wb.build_case(**{**TINY, **overrides}, seed=seed, device=device)


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch):
    """Each test starts with an empty, enabled cache of the default capacity."""
    monkeypatch.setattr(PLANS, "enabled", True)
    PLANS.clear()
    yield
    PLANS.clear()


def counts():
    s = PLANS.stats()
    return s["hits"], s["misses"]


def check_against_reference(out, lse, kw, what=""):
    ref_out, ref_lse = wb.sparse_mla_decode_reference(**kw)
    wb.assert_close(out.float(), lse, ref_out, ref_lse, what)


# ---- hits, misses, fresh outputs -----------------------------------------------------------------------------

@pytest.mark.parametrize("impl, shape", [("tile512", FULL), ("simt", TINY)], ids=["split-all-inputs", "fused-no-sink"])
@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_second_matching_call_hits_and_equals_the_plain_path(impl, shape):
    """Call 1 makes the plan (a miss), call 2 (other contents, same kind) replays it (a hit); both equal the
    uncached plain path bit for bit and the reference within tolerance."""
    a, b = tiny(seed=0, **shape), tiny(seed=1, **shape)
    out_a, lse_a = wb.sparse_mla_decode(**a.kwargs(), impl=impl)
    assert counts() == (0, 1)
    out_b, lse_b = wb.sparse_mla_decode(**b.kwargs(), impl=impl)
    assert counts() == (1, 1) and PLANS.stats()["size"] == 1
    for (out, lse), case in (((out_a, lse_a), a), ((out_b, lse_b), b)):
        plain_out, plain_lse = decode.plain_decode(**case.kwargs(), impl=impl)
        assert torch.equal(out, plain_out) and torch.equal(lse, plain_lse)
        check_against_reference(out, lse, case.kwargs(), impl)
    (plan,) = PLANS.plans()
    assert plan.output_slots and plan.out is None and plan.impl == impl


@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_every_call_returns_new_tensors():
    """Two calls through one plan: two distinct out (and lse) tensors; the second call leaves the first's intact."""
    a, b = tiny(seed=0), tiny(seed=1)
    out_a, lse_a = wb.sparse_mla_decode(**a.kwargs())
    kept_out, kept_lse = out_a.clone(), lse_a.clone()
    out_b, lse_b = wb.sparse_mla_decode(**b.kwargs())
    assert counts() == (1, 1)
    assert out_b is not out_a and lse_b is not lse_a
    assert out_b.data_ptr() != out_a.data_ptr() and lse_b.data_ptr() != lse_a.data_ptr()
    assert torch.equal(out_a, kept_out) and torch.equal(lse_a, kept_lse)
    assert not torch.equal(out_a, out_b)  # the second call's own result, not the first's buffer


def _variants(kw):
    """(id, keywords that change one thing the key holds) for a base call ``kw`` (impl tile512, no sink)."""
    q = kw["q"]
    wide = torch.zeros(*q.shape[:3], 2 * q.shape[3], dtype=q.dtype)[..., : q.shape[3]]  # other strides, stride(-1) 1
    wide.copy_(q)
    off = torch.zeros(q.numel() + 1, dtype=q.dtype)[1:].view(q.shape)  # 2 bytes past a 16-byte boundary
    off.copy_(q)
    other = tiny(seed=5, sink=True)
    return [
        ("strides", dict(q=wide)),
        ("alignment", dict(q=off)),
        ("shape", dict(tiny(seed=5, heads=8).kwargs())),
        ("page-size", dict(tiny(seed=5, block_size=32).kwargs())),
        ("dtype", dict(cache=kw["cache"].view(torch.float8_e4m3fn))),
        ("impl", dict(impl="mma")),
        ("config", dict(config=dict(BLOCK_H=16, BLOCK_T=16))),
        ("sm_scale", dict(sm_scale=0.25)),
        ("optional-input", dict(attn_sink=other.attn_sink)),
        ("combine-launch", dict()),  # the call is made inside combine_launch(True)
    ]


@pytest.mark.parametrize("what", [v for v, _ in _variants(tiny().kwargs())])
@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_a_call_that_differs_misses(what):
    """A call differing from the cached one in any part of the key makes a plan of its own, and is right."""
    kw = tiny(seed=0).kwargs()
    wb.sparse_mla_decode(**kw, impl="tile512")
    change = dict(_variants(kw))[what]
    call = {**kw, "impl": "tile512", **change}
    if what == "combine-launch":
        with decode.combine_launch(True):
            out, lse = wb.sparse_mla_decode(**call)
    else:
        out, lse = wb.sparse_mla_decode(**call)
    assert counts() == (0, 2)
    call.pop("impl"), call.pop("config", None)
    check_against_reference(out, lse, call, what)


def _wider(t):
    """t's values in a tensor of t's shape whose first stride is larger; a cache keeps its page layout (its page
    stride grows by 576 bytes, the layout's page alignment), any other input keeps stride(-1) == 1."""
    if t.dtype == torch.uint8 and t.dim() == 4:  # a cache view: copy whole pages, padding included
        n, s0 = t.shape[0], t.stride(0)
        buf = torch.zeros(n, s0 + 576, dtype=t.dtype)
        buf[:, :s0].copy_(t.as_strided((n, s0), (s0, 1)))
        return buf.as_strided(t.shape, (s0 + 576, *t.stride()[1:]))
    if t.dim() == 1:
        wide = torch.zeros(2 * t.shape[0], dtype=t.dtype)[::2]
    else:
        wide = torch.zeros(t.shape[0], 2 * t[0].numel(), dtype=t.dtype)[:, : t[0].numel()].view(t.shape)
    wide.copy_(t)
    return wide


@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_every_inputs_strides_are_in_the_key():
    """Each input in turn with other strides (same shape and values): a plan of its own, hit by the next such
    call, and the plain path's result bit for bit."""
    kw = tiny(**FULL).kwargs()
    wb.sparse_mla_decode(**kw)
    for n, name in enumerate(decode.INPUT_NAMES, start=1):
        call = {**kw, name: _wider(kw[name])}
        assert call[name].stride() != kw[name].stride() and torch.equal(call[name], kw[name])
        out, lse = wb.sparse_mla_decode(**call)
        assert counts() == (n - 1, n + 1), name
        out, lse = wb.sparse_mla_decode(**call)
        assert counts() == (n, n + 1), name
        plain_out, plain_lse = decode.plain_decode(**call)
        assert torch.equal(out, plain_out) and torch.equal(lse, plain_lse), name


def _unaligned(t):
    """t's values at a data_ptr one element past a 16-byte boundary."""
    off = torch.zeros(t.numel() + 1, dtype=t.dtype)[1:].view(t.shape)
    off.copy_(t)
    assert off.data_ptr() % 16
    return off


@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_alignment_is_keyed_per_input():
    """Which inputs are unaligned is in the key, not only whether any is: each pattern is a plan of its own."""
    kw = tiny(sink=True).kwargs()
    patterns = [(), ("q",), ("indices",), ("q", "indices"), ("attn_sink",)]
    for _ in range(2):
        for names in patterns:
            wb.sparse_mla_decode(**{**kw, **{n: _unaligned(kw[n]) for n in names}})
    assert counts() == (len(patterns), len(patterns))
    flags = {tuple(not p.inputs[n].aligned for n in ("q", "indices", "attn_sink")) for p in PLANS.plans()}
    assert flags == {tuple(n in names for n in ("q", "indices", "attn_sink")) for names in patterns}


@pytest.mark.parametrize("shape", [TINY, dict(TINY, batch=1, heads=16), dict(TINY, s_q=2)],
                         ids=["b2-h4", "b1-h16", "s_q2"])
@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_new_outputs_are_laid_out_as_the_plain_paths(shape):
    """A hit's out and lse: the plain path's shapes, dtypes and strides (contiguous), on the inputs' device."""
    kw = tiny(**shape).kwargs()
    wb.sparse_mla_decode(**kw)
    out, lse = wb.sparse_mla_decode(**kw)
    assert counts() == (1, 1)
    plain_out, plain_lse = decode.plain_decode(**kw)
    for got, want in ((out, plain_out), (lse, plain_lse)):
        assert (got.shape, got.stride(), got.dtype, got.device) == (want.shape, want.stride(), want.dtype,
                                                                     want.device)
        assert got.is_contiguous() and torch.equal(got, want)


@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_equal_values_written_differently_share_a_plan():
    """sm_scale 0.25 as a float or a numpy scalar, a config dict rebuilt: the same key (a hit)."""
    import numpy as np
    kw = tiny().kwargs()
    wb.sparse_mla_decode(**{**kw, "sm_scale": 0.25}, config=dict(BLOCK_H=16, BLOCK_T=16))
    wb.sparse_mla_decode(**{**kw, "sm_scale": np.float32(0.25)}, config=dict(BLOCK_H=16, BLOCK_T=16))
    assert counts() == (1, 1)


@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_least_recently_used_plan_is_dropped(monkeypatch):
    monkeypatch.setattr(PLANS, "capacity", 2)
    kw = tiny().kwargs()

    def call(scale):
        wb.sparse_mla_decode(**{**kw, "sm_scale": scale})
    call(0.1), call(0.2), call(0.3)                       # 0.1 dropped
    assert counts() == (0, 3) and PLANS.stats()["size"] == 2
    call(0.2)                                             # a hit: 0.2 is now the most recent, 0.3 the least
    assert counts() == (1, 3)
    call(0.1)                                             # planned again; drops 0.3
    call(0.2)
    assert counts() == (2, 4)
    call(0.3)
    assert counts() == (2, 5)
    assert [p.sm_scale for p in PLANS.plans()] == [0.2, 0.3]  # least recently used first
    call(0.2)
    assert [p.sm_scale for p in PLANS.plans()] == [0.3, 0.2]


@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_off_switch_and_clear(monkeypatch):
    kw = tiny().kwargs()
    monkeypatch.setattr(PLANS, "enabled", False)
    a = wb.sparse_mla_decode(**kw)
    b = wb.sparse_mla_decode(**kw)
    assert PLANS.stats() == dict(hits=0, misses=0, bypassed={}, size=0, capacity=decode.PLAIN_PLANS_MAX,
                                 enabled=False, last_refusal=None)
    assert torch.equal(a[0], b[0]) and a[0] is not b[0]
    monkeypatch.setattr(PLANS, "enabled", True)
    wb.sparse_mla_decode(**kw)
    wb.sparse_mla_decode(**kw)
    assert counts() == (1, 1) and PLANS.stats()["size"] == 1
    PLANS.clear()
    assert counts() == (0, 0) and PLANS.stats()["size"] == 0


def test_environment_turns_the_cache_off():
    code = "import workbench.decode as d; print(d.PLAIN_PLANS.enabled)"
    env = {**os.environ, "WORKBENCH_PLAIN_PLANS": "0", "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.stdout.strip() == "False", run.stderr


# ---- calls the cache leaves to the plain path ------------------------------------------------------------------

@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_calls_a_plan_cannot_serve_take_the_plain_path():
    case = tiny()
    kw = case.kwargs()
    q_cols = case.q.transpose(2, 3).contiguous().transpose(2, 3)  # stride(-1) != 1: the plain path copies it
    cached_cfg = SimpleNamespace()  # neither a dict nor a typed config: not keyed
    calls = [
        ("sm_scale", dict(sm_scale=torch.tensor(0.07))),  # a tensor: read per call by the plain path, never keyed
        ("row stride", dict(q=q_cols)),
        ("impl", dict(impl="reference")),
    ]
    for reason, change in calls:
        out, lse = wb.sparse_mla_decode(**{**kw, **change})
        assert PLANS.stats()["bypassed"].get(reason) == 1, (reason, PLANS.stats())
        check_against_reference(out, lse, {**kw, **{k: v for k, v in change.items() if k != "impl"}}, reason)
    with pytest.raises(TypeError, match="config: expected a dict"):
        wb.sparse_mla_decode(**kw, config=cached_cfg)
    assert PLANS.stats()["bypassed"]["config"] == 1
    with capture_launches() as records:  # recorded by the launchers, as without the cache
        wb.sparse_mla_decode(**kw)
    assert records and PLANS.stats()["bypassed"]["capture_launches"] == 1
    assert counts() == (0, 0) and PLANS.stats()["size"] == 0


@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_a_refused_plan_is_remembered_and_the_plain_path_runs():
    """The fused kernel cannot bind topk_length stored at indices' data_ptr (a plan_decode ValueError: no argument
    name tells them apart): the plain path runs those calls, and the refusal is kept, so the second call does not
    try to plan again."""
    kw = tiny(extra_topk=16).kwargs()
    kw.update(topk_length=kw["indices"].view(-1)[: kw["q"].shape[0]])
    for n in (1, 2):
        out, lse = wb.sparse_mla_decode(**kw, impl="simt")
        assert PLANS.stats()["bypassed"] == {"refused": n} and counts() == (0, 0)
    assert PLANS.stats()["last_refusal"].startswith("ValueError: indices and topk_length: share data_ptr")
    check_against_reference(out, lse, kw, "refused")


@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_invalid_calls_raise_as_before():
    """Validation errors are the plain path's, on every call (a refused key does not hide them)."""
    kw = tiny().kwargs()
    for _ in range(2):
        with pytest.raises(ValueError, match="q: expected last dimension 512"):
            wb.sparse_mla_decode(**{**kw, "q": kw["q"][..., :256]})
        with pytest.raises(ValueError, match="sm_scale: expected a positive finite real"):
            wb.sparse_mla_decode(**{**kw, "sm_scale": -1.0})
    with pytest.raises(TypeError, match="q: expected a torch.Tensor"):
        wb.sparse_mla_decode(**{**kw, "q": kw["q"].float().numpy()})


# ---- the compiled replay (GPU path), its C launch stubbed ------------------------------------------------------

class LaunchRecorder:
    def __init__(self):
        self.calls, self.streams = [], []

    def __call__(self, g0, g1, g2, stream, function, packed, meta, enter, leave, *args):
        self.calls.append(args)
        self.streams.append(stream)


@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_output_slots_get_each_calls_new_pointers():
    """An output_slots plan on the compiled replay: out and lse pointers are each call's new tensors; the split
    scratch pointers stay the plan's; the plan keeps no output."""
    rec = LaunchRecorder()

    def compile_stub(kernel, grid, args):
        return SimpleNamespace(run=rec, function=0, packed_metadata=(4, 1, 0), launch_metadata=lambda *a: None)
    kw = tiny(**FULL).kwargs()
    plan = plan_mod.build_plan({n: kw.get(n) for n in decode.INPUT_NAMES}, sm_scale=kw["sm_scale"], impl="tile512",
                               config=None, compile_launch=compile_stub, get_stream=lambda d: 0, output_slots=True)
    assert plan.out is None and plan.lse is None
    inputs = tuple(kw.get(n) for n in decode.INPUT_NAMES)
    ptrs = [0 if t is None else t.data_ptr() for t in inputs]
    first = plan.fresh_call(inputs, ptrs)
    second = plan.fresh_call(inputs, ptrs)
    assert first[0].shape == (2, 1, 4, 512) and first[1].shape == (2, 4, 1) and first[0].dtype == torch.bfloat16
    assert first[0].is_contiguous() and first[1].is_contiguous() and first[1].dtype == torch.float32
    combine = [dict(zip(b.kernel.arg_names, args)) for b, args in zip(plan.launches * 2, rec.calls)][2::3]
    for (out, lse), args in zip((first, second), combine):
        assert args["out_ptr"] == out.data_ptr() and args["lse_ptr"] == lse.data_ptr()
        assert args["part_out_ptr"] == plan.part_out.data_ptr()
    assert first[0].data_ptr() != second[0].data_ptr()
    held = [v for b in plan.launches for v in b.fixed.values() if isinstance(v, torch.Tensor)]
    assert all(v.data_ptr() not in (first[0].data_ptr(), first[1].data_ptr()) for v in held)


@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_fresh_call_launches_on_the_stream_it_is_given():
    """The plain path hands its key's stream to the replay (asked once per call); without one the plan asks."""
    rec, asked = LaunchRecorder(), []

    def compile_stub(kernel, grid, args):
        return SimpleNamespace(run=rec, function=0, packed_metadata=(4, 1, 0), launch_metadata=lambda *a: None)
    kw = tiny(**FULL).kwargs()
    plan = plan_mod.build_plan({n: kw.get(n) for n in decode.INPUT_NAMES}, sm_scale=kw["sm_scale"], impl="tile512",
                               config=None, compile_launch=compile_stub,
                               get_stream=lambda d: asked.append(d) or 7, output_slots=True)
    inputs = tuple(kw.get(n) for n in decode.INPUT_NAMES)
    ptrs = [0 if t is None else t.data_ptr() for t in inputs]
    plan.fresh_call(inputs, ptrs, 5)
    assert rec.streams == [5] * len(plan.launches) and asked == []
    plan.fresh_call(inputs, ptrs)
    assert rec.streams[len(plan.launches):] == [7] * len(plan.launches) and asked == [0]


@pytest.mark.parametrize("impl", ["tile512", "simt"], ids=["split", "fused"])
@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_partials_are_launched_before_the_outputs_are_made(impl):
    """A split plan's compiled replay launches the partials (which take neither out nor lse) first, then makes out
    and lse, then launches the combine: on the GPU the partials run while the host allocates. A fused launch
    writes the outputs, so they are made first."""
    from torch.utils._python_dispatch import TorchDispatchMode
    events = []

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            events.append(str(func))
            return func(*args, **(kwargs or {}))

    def compile_stub(kernel, grid, args):
        name = kernel.fn.__name__
        return SimpleNamespace(run=lambda *a: events.append(name), function=0, packed_metadata=(4, 1, 0),
                               launch_metadata=lambda *a: None)
    kw = tiny(**FULL).kwargs()
    plan = plan_mod.build_plan({n: kw.get(n) for n in decode.INPUT_NAMES}, sm_scale=kw["sm_scale"], impl=impl,
                               config=None, compile_launch=compile_stub, get_stream=lambda d: 0, output_slots=True)
    inputs = tuple(kw.get(n) for n in decode.INPUT_NAMES)
    with Ops():
        plan.fresh_call(inputs, [0 if t is None else t.data_ptr() for t in inputs])
    names = [b.kernel.fn.__name__ for b in plan.launches]
    made = [e for e in events if e.startswith("aten.")]
    assert len(made) == 2 and all("empty" in e for e in made), events
    if impl == "tile512":
        assert len(names) == 3 and events == names[:2] + made + names[2:]
    else:
        assert events == made + names


@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_cached_call_host_cost_is_far_below_the_plain_path():
    """Smoke check (launches stubbed): a hit costs a small fraction of the plain path's validation and planning."""
    kw = tiny(**FULL).kwargs()
    wb.sparse_mla_decode(**kw)
    (plan,) = PLANS.plans()
    stub = SimpleNamespace(run=lambda *a: None, function=0, packed_metadata=(4, 1, 0), launch_metadata=lambda *a: None)
    plan._use_compiled([plan_mod.compiled_launch(stub, b.kernel, b.grid, {**b.fixed, **{n: 0 for n, _, _ in b.slots}},
                                                 b.slots) for b in plan.launches], lambda d: 0)
    per_hit = min(timeit.repeat(lambda: wb.sparse_mla_decode(**kw), number=200, repeat=3)) / 200
    with capture_launches():  # the plain path, launches recorded instead of run
        per_plain = min(timeit.repeat(lambda: wb.sparse_mla_decode(**kw), number=20, repeat=3)) / 20
    assert per_hit < per_plain / 3, (per_hit, per_plain)


# ---- threads under the interpreter -----------------------------------------------------------------------------

@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_threads_decode_at_once_under_the_interpreter():
    """Three threads at once: plain calls through the cache, calls with an explicit plan, uncached plain calls
    (a tensor sm_scale). The interpreter keeps its grid state globally; without decode.INTERPRETER_LOCK this fails
    (InterpreterError 'z >= grid_dim[2]') or gives wrong results."""
    cases = [tiny(seed=1), tiny(seed=2, heads=8), tiny(seed=3, topk=32)]
    plan = wb.plan_decode(**cases[1].kwargs())
    calls = [lambda kw: wb.sparse_mla_decode(**kw),
             lambda kw: tuple(t.clone() for t in wb.sparse_mla_decode(**kw, plan=plan)),
             lambda kw: wb.sparse_mla_decode(**{**kw, "sm_scale": torch.tensor(kw["sm_scale"] or 512 ** -0.5)})]
    results, errors = {}, []
    start = threading.Barrier(len(cases))

    def work(i):
        try:
            kw = cases[i].kwargs()
            start.wait()
            results[i] = [calls[i](kw) for _ in range(3)]
        except Exception as e:  # noqa: BLE001  reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i, case in enumerate(cases):
        for out, lse in results[i]:
            check_against_reference(out, lse, case.kwargs(), f"thread {i}")


# ---- GPU: the real compiled replay ---------------------------------------------------------------------------

gpu = pytest.mark.gpu


@gpu
@pytest.mark.parametrize("impl", ["auto", "tile512", "simt"])
def test_gpu_cached_call_equals_plain_without_sync(impl):
    a, b = tiny(seed=0, device="cuda", **FULL), tiny(seed=1, device="cuda", **FULL)
    first = wb.sparse_mla_decode(**a.kwargs(), impl=impl)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out, lse = wb.sparse_mla_decode(**b.kwargs(), impl=impl)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert counts() == (1, 1) and out.data_ptr() != first[0].data_ptr()
    plain_out, plain_lse = decode.plain_decode(**b.kwargs(), impl=impl)
    torch.cuda.synchronize()
    assert torch.equal(out, plain_out) and torch.equal(lse, plain_lse)


@gpu
def test_gpu_streams_get_plans_of_their_own():
    kw = tiny(device="cuda").kwargs()
    wb.sparse_mla_decode(**kw)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out, lse = wb.sparse_mla_decode(**kw)
        wb.sparse_mla_decode(**kw)
    torch.cuda.current_stream().wait_stream(side)
    assert counts() == (1, 2)
    plain = decode.plain_decode(**kw)
    torch.cuda.synchronize()
    assert torch.equal(out, plain[0]) and torch.equal(lse, plain[1])


@gpu
def test_gpu_graph_capture_takes_the_plain_path():
    """Under capture the call is the plain path's (its own scratch and outputs in the graph's pool), also when the
    capture stream has a plan; the replay reads the inputs' new contents."""
    a, b = tiny(seed=0, device="cuda"), tiny(seed=1, device="cuda")
    kw = a.kwargs()
    wb.warmup([kw])  # tunes (and makes a plan for the current stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = wb.sparse_mla_decode(**kw)
    assert PLANS.stats()["bypassed"] == {"graph capture": 1}
    for name, t in kw.items():
        if isinstance(t, torch.Tensor):
            t.copy_(b.kwargs()[name])
    graph.replay()
    ref = decode.plain_decode(**b.kwargs())
    torch.cuda.synchronize()
    assert torch.equal(out, ref[0]) and torch.equal(lse, ref[1])
