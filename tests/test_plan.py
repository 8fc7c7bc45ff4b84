"""Plan once, launch fast: the plan path equals the plain path, allocates and synchronises nothing, and
rejects inputs that no longer match its plan with a ValueError naming the argument.

On the CPU the interpreted replay runs the real kernels; the compiled replay (GPU) is exercised with its C
launch stubbed by a recorder, so its host logic runs here too. The GPU tests (``-m gpu``) run every device
kernel through the real compiled replay.
"""
import contextlib
import timeit
from types import SimpleNamespace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import workbench as wb
from workbench import plan as plan_mod
from workbench import registry

# Hostile but tiny: shuffled pages, a page size of 61, -1 and out-of-range indices, topk_length (0 for one
# batch), a sink, an extra scope with its own page size, and a non-default sm_scale.
HOSTILE = dict(batch=2, heads=16, topk=32, block_size=61, sink=True, topk_length=True, extra_topk=16,
               extra_block_size=32, extra_topk_length=True, sm_scale=0.07)


def hostile_case(seed=0, device="cpu", **overrides):
    return wb.build_case(**{**HOSTILE, **overrides}, seed=seed, device=device)


# ---- the compiled replay with its C launch stubbed ----------------------------------------------------------

class LaunchRecorder:
    """Stands in for Triton's C launcher: records (grid, stream, argument list) per launch."""

    def __init__(self):
        self.calls = []

    def __call__(self, g0, g1, g2, stream, function, packed, meta, enter, leave, *args):
        self.calls.append(((g0, g1, g2), stream, args))


def stub_compiled_plan(case, impl, recorder=None, config=None):
    """A plan whose calls take the compiled replay path, each launch going to ``recorder`` (or a no-op)."""
    run = recorder if recorder is not None else (lambda *a: None)

    def compile_stub(kernel, grid, args):
        return SimpleNamespace(run=run, function=0, packed_metadata=(4, 1, 0), launch_metadata=lambda *a: None)
    kw = case.kwargs()
    user = {name: kw.get(name) for name in wb.decode.INPUT_NAMES}
    return plan_mod.build_plan(user, sm_scale=kw["sm_scale"], impl=impl, config=config, compile_launch=compile_stub,
                               get_stream=lambda device_index: 7)


class AtenOps(TorchDispatchMode):
    """Every aten op run inside it: allocations, copies, views and scalar reads (``.item()``) all show up."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def _raiser(what):
    def boom(*args, **kwargs):
        raise AssertionError(f"host synchronisation on the plan path: {what}")
    return boom


@contextlib.contextmanager
def no_host_sync(monkeypatch):
    """Make every way a tensor's value reaches the host raise (on the GPU each would synchronise)."""
    with monkeypatch.context() as m:
        for name in ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__"):
            m.setattr(torch.Tensor, name, _raiser(f"Tensor.{name}"))
        m.setattr(torch.Tensor, "to", _raiser("Tensor.to"))
        m.setattr(torch.cuda, "synchronize", _raiser("torch.cuda.synchronize"))
        m.setattr(torch.cuda.Stream, "synchronize", _raiser("Stream.synchronize"))
        m.setattr(torch.cuda.Event, "synchronize", _raiser("Event.synchronize"))
        yield


# ---- plan path == plain path --------------------------------------------------------------------------------

@pytest.mark.parametrize("impl", ["tile512", "mma", "simt"])
@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_plan_path_equals_plain_path_bit_for_bit(impl):
    """Planned on one case, called on another of the same shapes: out and lse equal the plain path's exactly."""
    plan = wb.plan_decode(**hostile_case(seed=0).kwargs(), impl=impl)
    kw = hostile_case(seed=1).kwargs()
    out_ref, lse_ref = wb.sparse_mla_decode(**kw, impl=impl)
    out, lse = wb.sparse_mla_decode(**kw, plan=plan)
    assert out is plan.out and lse is plan.lse
    assert torch.equal(out, out_ref) and torch.equal(lse, lse_ref)
    assert torch.isinf(lse).any(), "the case should hold a query with no valid token (topk_length 0)"


@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_plan_records_scopes_and_splits():
    """A split plan binds one partial launch per scope and the combine; slots map the right inputs."""
    kw = hostile_case().kwargs()
    plan = wb.plan_decode(**kw, impl="tile512")
    assert plan.impl == "tile512" and plan.kind == "split" and len(plan.launches) == 3
    names = [{a: wb.decode.INPUT_NAMES[i] for a, i, _ in b.slots} for b in plan.launches]
    assert names[0]["cache_f8"] == "cache" and names[0]["topk_len_ptr"] == "topk_length"
    assert names[1]["cache_u8"] == "extra_cache" and names[1]["idx_ptr"] == "extra_indices"
    assert names[2] == {"sink_ptr": "attn_sink"}
    assert plan.part_lse.shape[-1] == sum(s.num_splits for s in plan.splits)
    inputs = [t for t in kw.values() if isinstance(t, torch.Tensor)]
    for b in plan.launches:  # the plan keeps no reference to the example inputs (nor views of them)
        held = [v for v in b.fixed.values() if isinstance(v, torch.Tensor)]
        assert held and not any(v.data_ptr() == t.data_ptr() for v in held for t in inputs)


# ---- reuse allocates nothing ------------------------------------------------------------------------------

@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_plan_reuse_allocates_nothing_compiled_replay():
    """The compiled replay (GPU path) runs no torch op at all on a repeated call: no allocation, no copy."""
    plan = stub_compiled_plan(hostile_case(seed=0), "tile512")
    kw = hostile_case(seed=1).kwargs()
    first = wb.sparse_mla_decode(**kw, plan=plan)
    with AtenOps() as seen:
        second = wb.sparse_mla_decode(**kw, plan=plan)
    assert seen.ops == []
    assert first[0] is second[0] is plan.out and first[1] is second[1] is plan.lse


@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_plan_reuse_allocates_nothing_interpreted_replay(monkeypatch):
    """The interpreted replay's own host code makes only the cache views (no allocation) before each launch."""
    plan = wb.plan_decode(**hostile_case(seed=0).kwargs(), impl="simt")
    launched = []

    class Kernel:
        def __getitem__(self, grid):
            return lambda **args: launched.append((grid, args))
    monkeypatch.setattr(plan, "_interpreted", tuple((Kernel(), g, f, s) for _, g, f, s in plan._interpreted))
    kw = hostile_case(seed=1).kwargs()
    with AtenOps() as seen:
        out, lse = wb.sparse_mla_decode(**kw, plan=plan)
    assert set(seen.ops) <= {"aten.view.dtype", "aten.as_strided.default", "aten.detach.default"}, seen.ops  # views
    assert out is plan.out and lse is plan.lse and len(launched) == 1
    args = launched[0][1]
    assert args["q_ptr"] is kw["q"] and args["x_idx_ptr"] is kw["extra_indices"] and args["out_ptr"] is plan.out
    assert args["cache_bf16"].dtype == torch.bfloat16 and args["cache_bf16"].data_ptr() == kw["cache"].data_ptr()


@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_compiled_replay_fills_pointers_per_call():
    """Each launch gets the current inputs' data_ptr in its slots and the plan buffers' pointers fixed."""
    rec = LaunchRecorder()
    plan = stub_compiled_plan(hostile_case(seed=0), "mma", rec)
    kw = hostile_case(seed=1).kwargs()
    wb.sparse_mla_decode(**kw, plan=plan)
    assert len(rec.calls) == len(plan.launches) == 3
    for (grid, stream, args), bound in zip(rec.calls, plan.launches):
        assert grid == bound.grid and stream == 7
        assert len(args) == len(bound.kernel.arg_names)
        by_name = dict(zip(bound.kernel.arg_names, args))
        for arg, i, _ in bound.slots:
            assert by_name[arg] == kw[wb.decode.INPUT_NAMES[i]].data_ptr()
    partial, extra, combine = (dict(zip(b.kernel.arg_names, c[2])) for b, c in zip(plan.launches, rec.calls))
    assert partial["part_out_ptr"] == plan.part_out.data_ptr() and extra["split_offset"] == plan.splits[0].num_splits
    assert combine["out_ptr"] == plan.out.data_ptr() and combine["sink_ptr"] == kw["attn_sink"].data_ptr()


def cuda_launcher(launch, **attrs):
    """A real Triton CudaLauncher whose C launch is ``launch`` (made without compiling: it holds only what its
    ``__call__`` reads)."""
    from triton.backends.nvidia.driver import CudaLauncher
    run = CudaLauncher.__new__(CudaLauncher)
    run.__dict__.update(dict(num_ctas=1, launch=launch, global_scratch_size=0, global_scratch_align=1,
                             profile_scratch_size=0, profile_scratch_align=1, launch_cooperative_grid=False,
                             launch_pdl=False), **attrs)
    return run


def launcher_plan(case, record, **attrs):
    """A plan whose launches go through CudaLauncher objects, their C launch appending its arguments to record;
    the combine's launcher has the PDL flag, the partials' the cooperative one (so the test sees where each goes)."""
    def compile_stub(kernel, grid, args):
        pdl = "PDL" in args
        run = cuda_launcher(lambda *a: record.append(a), launch_pdl=pdl, launch_cooperative_grid=not pdl, **attrs)
        return SimpleNamespace(run=run, function=11, packed_metadata=(4, 1, 0),
                               launch_metadata=lambda grid, stream, *a: ("meta", grid, stream, a))
    kw = case.kwargs()
    return plan_mod.build_plan({n: kw.get(n) for n in wb.decode.INPUT_NAMES}, sm_scale=kw["sm_scale"],
                               impl="tile512", config=None, compile_launch=compile_stub, get_stream=lambda d: 7)


@pytest.mark.parametrize("hooked", [False, True], ids=["no-hooks", "profiler-hooks"])
@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_direct_c_launch_passes_what_triton_launcher_would(monkeypatch, hooked):
    """The replay calls a CudaLauncher's C launch itself (not its Python __call__) with the very arguments
    __call__ would pass it: flags, scratch, metadata, hooks and kernel arguments, in order."""
    from triton import knobs
    from triton.backends.nvidia.driver import CudaLauncher
    case, kw = hostile_case(seed=0), hostile_case(seed=1).kwargs()
    direct, wrapped = [], []
    direct_plan = launcher_plan(case, direct)
    with monkeypatch.context() as m:
        m.setattr(plan_mod, "_c_launch", lambda run: None)  # every launch through CudaLauncher.__call__
        wrapped_plan = launcher_plan(case, wrapped)
    if hooked:
        monkeypatch.setattr(knobs.runtime.launch_enter_hook, "calls", [lambda meta: None])  # a profiler's
    wb.sparse_mla_decode(**kw, plan=wrapped_plan)
    monkeypatch.setattr(CudaLauncher, "__call__", _raiser("CudaLauncher.__call__ on the direct path"))
    wb.sparse_mla_decode(**kw, plan=direct_plan)
    assert len(direct) == len(wrapped) == len(direct_plan.launches) == 3
    swap = {direct_plan.part_out.data_ptr(): wrapped_plan.part_out.data_ptr(),
            direct_plan.part_lse.data_ptr(): wrapped_plan.part_lse.data_ptr(),
            direct_plan.out.data_ptr(): wrapped_plan.out.data_ptr(),
            direct_plan.lse.data_ptr(): wrapped_plan.lse.data_ptr()}  # each plan's own buffers
    for d, w in zip(direct, wrapped):
        d = [swap.get(v, v) if type(v) is int else v for v in d]
        if hooked:
            d[10] = ("meta", d[10][1], d[10][2], tuple(swap.get(v, v) if type(v) is int else v for v in d[10][3]))
        assert d == list(w)
    assert [a[5:7] for a in direct] == [(True, False), (True, False), (False, True)]  # cooperative, pdl
    assert all(a[3] == 7 and a[7] is None and a[8] is None for a in direct)  # stream; no scratch
    assert all((a[10] is None) != hooked and (a[11] is None) != hooked for a in direct)


@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_a_kernel_with_scratch_goes_through_triton_launcher(monkeypatch):
    """A launcher with global scratch is called as run(...): its allocator gives each launch its scratch."""
    from triton.runtime import _allocation
    record, sizes = [], []
    scratch = SimpleNamespace(data_ptr=lambda: 4096)

    def allocate(size, align, stream):
        sizes.append((size, align, stream))
        return scratch
    monkeypatch.setattr(_allocation, "_allocator", SimpleNamespace(get=lambda: allocate))
    plan = launcher_plan(hostile_case(seed=0), record, global_scratch_size=32, global_scratch_align=16)
    wb.sparse_mla_decode(**hostile_case(seed=1).kwargs(), plan=plan)
    assert [a[7] for a in record] == [scratch] * 3
    assert sizes == [(32 * b.grid[0] * b.grid[1] * b.grid[2], 16, 7) for b in plan.launches]


# ---- no host synchronisation --------------------------------------------------------------------------------

@pytest.mark.parametrize("impl", ["tile512", "simt"])
@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_plan_path_never_synchronises(monkeypatch, impl):
    """With every host read of a tensor made to raise, a plan call (launch stubbed) still goes through."""
    rec = LaunchRecorder()
    plan = stub_compiled_plan(hostile_case(seed=0), impl, rec)
    kw = hostile_case(seed=1).kwargs()
    with no_host_sync(monkeypatch), AtenOps() as seen:
        out, lse = wb.sparse_mla_decode(**kw, plan=plan)
        plan(**kw)
    assert seen.ops == [] and len(rec.calls) == 2 * len(plan.launches) and out is plan.out


@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_sync_guard_catches_a_host_read_on_the_plan_path(monkeypatch):
    """The guard above is not vacuous: a `topk_length.max().item()` slipped into the plan path trips it."""
    plan = stub_compiled_plan(hostile_case(seed=0), "tile512")
    kw = hostile_case(seed=1).kwargs()
    replay = plan._replay

    def replay_with_a_host_read(inputs, ptrs):
        inputs[3].max().item()  # topk_length
        replay(inputs, ptrs)
    monkeypatch.setattr(plan, "_replay", replay_with_a_host_read)
    with no_host_sync(monkeypatch), pytest.raises(AssertionError, match="host synchronisation"):
        wb.sparse_mla_decode(**kw, plan=plan)
    with AtenOps() as seen:
        wb.sparse_mla_decode(**kw, plan=plan)
    assert "aten._local_scalar_dense.default" in seen.ops


# ---- inputs that no longer match the plan ---------------------------------------------------------------------

def _mismatches(kw):
    q = kw["q"]
    wide = torch.zeros(*q.shape[:3], 2 * q.shape[3], dtype=q.dtype)[..., : q.shape[3]]  # same shape, other strides
    cache = kw["cache"]
    wider_pages = torch.zeros(cache.shape[0], cache.stride(0) + 64, dtype=cache.dtype).as_strided(
        cache.shape, (cache.stride(0) + 64, *cache.stride()[1:]))  # same shape, pages 64 bytes further apart
    return [
        ("q", dict(q=q[:1]), "shape"),
        ("q", dict(q=wide), "strides"),
        ("q", dict(q=q.float()), "dtype"),
        ("cache", dict(cache=wider_pages), "strides"),
        ("indices", dict(indices=kw["indices"].long()), "dtype"),
        ("indices", dict(indices=kw["indices"][:, :, :16]), "shape"),
        ("topk_length", dict(topk_length=None), "None"),
        ("attn_sink", dict(attn_sink=None), "None"),
        ("extra_cache", dict(extra_cache=None, extra_indices=None, extra_topk_length=None), "None"),
        ("extra_topk_length", dict(extra_topk_length=kw["extra_topk_length"][:1]), "shape"),
        ("impl", dict(impl="mma"), "tile512"),
        ("sm_scale", dict(sm_scale=0.5), "0.07"),
        ("config", dict(config=dict(BLOCK_H=16, BLOCK_T=16)), "without a config"),
    ]


@pytest.mark.parametrize("arg,change,says", _mismatches(hostile_case().kwargs()),
                         ids=[f"{a}-{s}" for a, _, s in _mismatches(hostile_case().kwargs())])
@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_mismatched_input_is_a_value_error_naming_it(arg, change, says):
    case = hostile_case()
    plan = wb.plan_decode(**case.kwargs(), impl="tile512")
    kw = {**case.kwargs(), **change}
    with pytest.raises(ValueError, match=rf"^{arg}: .*{says}"):
        wb.sparse_mla_decode(**kw, plan=plan)


@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_optional_input_the_plan_lacks_is_a_value_error():
    case = hostile_case(sink=False, topk_length=False, extra_topk=0)
    plan = wb.plan_decode(**case.kwargs(), impl="simt")
    other = hostile_case()
    for name in ("attn_sink", "topk_length"):
        with pytest.raises(ValueError, match=rf"^{name}: the plan was made without it"):
            wb.sparse_mla_decode(**{**case.kwargs(), name: other.kwargs()[name]}, plan=plan)


@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_matching_keywords_are_accepted():
    """impl (the requested name, the kernel, or 'auto'), sm_scale and config equal to the plan's pass."""
    case = hostile_case(seed=0)
    cfg = dict(BLOCK_H=16, BLOCK_T=16, num_warps=4, num_stages=1)
    rec = LaunchRecorder()
    plan = stub_compiled_plan(case, "tile512", rec, config=cfg)
    kw = {**case.kwargs(), "sm_scale": torch.tensor(0.07, dtype=torch.float64)}
    for impl in ("auto", "tile512"):
        wb.sparse_mla_decode(**kw, impl=impl, config=dict(cfg), plan=plan)
    assert len(rec.calls) == 2 * len(plan.launches)


@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_plan_time_errors():
    case = hostile_case()
    with pytest.raises(ValueError, match="impl: 'reference' launches no kernels"):
        wb.plan_decode(**case.kwargs(), impl="reference")
    q = case.q.transpose(2, 3).contiguous().transpose(2, 3)  # last stride != 1
    with pytest.raises(ValueError, match=r"^q: a plan needs stride\(-1\) == 1"):
        wb.plan_decode(**{**case.kwargs(), "q": q}, impl="tile512")
    with pytest.raises(ValueError, match="q: expected last dimension 512"):  # validated like decode
        wb.plan_decode(**{**case.kwargs(), "q": case.q[..., :256]})


def test_plan_refuses_a_tensor_sm_scale():
    """A plan reads sm_scale once: a tensor's later in-place changes would be missed (rel error 0.11 before this
    refusal), so plan_decode asks for a Python float, in one line."""
    case = hostile_case()
    for scale in (torch.tensor(0.07), torch.tensor(0.07).numpy()):
        with pytest.raises(ValueError, match=r"^sm_scale: a plan reads sm_scale once.*pass a Python float") as err:
            wb.plan_decode(**{**case.kwargs(), "sm_scale": scale})
        assert "\n" not in str(err.value)


@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_one_tensor_for_both_scopes_binds_by_the_argument_names():
    """The fused kernel reads both scopes in one launch; with one cache passed for both, the kernel's x_ names say
    which argument is the extra scope's, so each binds to its own input (a later call may pass two caches)."""
    kw = hostile_case().kwargs()
    kw.update(extra_cache=kw["cache"])
    kw.update(extra_indices=kw["indices"][:, :, :16].contiguous())
    (launch,) = wb.plan_decode(**kw, impl="simt").launches
    slots = {arg: index for arg, index, _ in launch.slots}
    assert slots["cache_u8"] == wb.decode.INPUT_NAMES.index("cache")
    assert slots["x_cache_u8"] == wb.decode.INPUT_NAMES.index("extra_cache")
    assert wb.plan_decode(**kw, impl="tile512").launches[1].slots[1][1] == wb.decode.INPUT_NAMES.index("extra_cache")


def test_inputs_sharing_a_pointer_in_one_launch_with_no_name_to_tell_are_ambiguous():
    """Two inputs of one scope on one pointer (indices as topk_length's storage): refused, with the reason."""
    kw = hostile_case().kwargs()
    kw.update(topk_length=kw["indices"].view(-1)[: kw["q"].shape[0]])
    with pytest.raises(ValueError, match="indices and topk_length: share data_ptr"):
        wb.plan_decode(**kw, impl="simt")


# ---- host cost ---------------------------------------------------------------------------------------------

@pytest.mark.interpreter  # CPU tensors: runs only where Triton interprets
def test_plan_host_path_is_cheaper_than_planning():
    """Smoke check of the host cost (launch stubbed): well under the plain path's validation and planning."""
    plan = stub_compiled_plan(hostile_case(seed=0), "tile512")
    kw = hostile_case(seed=1).kwargs()
    per_plan = min(timeit.repeat(lambda: wb.sparse_mla_decode(**kw, plan=plan), number=200, repeat=3)) / 200
    from workbench.kernels.common import capture_launches
    with capture_launches():
        per_plain = min(timeit.repeat(lambda: wb.sparse_mla_decode(**kw, impl="tile512"), number=20, repeat=3)) / 20
    assert per_plan < per_plain


# ---- GPU: the real compiled replay --------------------------------------------------------------------------

def _gpu_kernels():
    return [n for n in registry.names("split", "fused")]


gpu = pytest.mark.gpu
def _runs_here(impl):
    if impl != "auto" and not registry.get(impl).interpretable and torch.cuda.get_device_capability()[0] != 9:
        pytest.skip(f"{impl} is an sm_90 (Gluon) kernel")


@gpu
@pytest.mark.parametrize("impl", _gpu_kernels() + ["auto"])
def test_gpu_plan_equals_plain_without_sync(impl):
    _runs_here(impl)
    hostile = dict(nan_unselected=True, all_invalid_queries=1)
    plan = wb.plan_decode(**hostile_case(seed=0, device="cuda", **hostile).kwargs(), impl=impl)
    assert plan.compiled
    kw = hostile_case(seed=1, device="cuda", **hostile).kwargs()
    out_ref, lse_ref = wb.sparse_mla_decode(**kw, impl=impl)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out, lse = wb.sparse_mla_decode(**kw, plan=plan)
        wb.sparse_mla_decode(**kw, plan=plan)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert out is plan.out and lse is plan.lse
    assert torch.equal(out, out_ref) and torch.equal(lse, lse_ref)


@gpu
def test_gpu_plan_replays_under_a_cuda_graph():
    """A plan call captured in a CUDA graph reads whatever its input tensors hold at replay."""
    a, b = hostile_case(seed=0, device="cuda"), hostile_case(seed=1, device="cuda")
    kw = a.kwargs()
    plan = wb.plan_decode(**kw)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        wb.sparse_mla_decode(**kw, plan=plan)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        wb.sparse_mla_decode(**kw, plan=plan)
    for name, t in kw.items():  # new contents, same tensors (a cache's copy_ skips its page padding: unread)
        if isinstance(t, torch.Tensor):
            t.copy_(b.kwargs()[name])
    graph.replay()
    out_ref, lse_ref = wb.sparse_mla_decode(**b.kwargs())
    torch.cuda.synchronize()
    assert torch.equal(plan.out, out_ref) and torch.equal(plan.lse, lse_ref)
