"""Plan once, launch fast: a decode's kernel launches bound once, then replayed for each call.

``plan_decode`` takes example inputs (their shapes, dtypes, strides, device, page sizes and the extra scope
are what it plans for), validates them once, picks the kernel, plans the splits, allocates the outputs and
split scratch, and runs decode's own launch sequence (``decode.launch_stages``) under
``kernels.common.capture_launches``, which records each launch instead of running it. Each record is then
bound once: an autotuner is resolved to the config it picks for these inputs, the grid is fixed, and every
tensor argument is either a plan buffer (fixed) or a slot filled per call from one user input.

``sparse_mla_decode(..., plan=plan)`` then only checks that the inputs still match the plan and replays the
bound launches:
- on the GPU each launch is compiled once and replayed straight into Triton's C launch function (what
  ``CompiledKernel.run`` calls) with a precomputed argument list, user inputs as ``data_ptr()`` integers;
- under the interpreter (or any non-CUDA device) the same bound launches run as ``kernel[grid](**args)``.
No validation, allocation or host synchronisation happens on that path.

The plain path (``sparse_mla_decode`` without ``plan=``) keeps plans of its own (``decode.PLAIN_PLANS``), made
with ``output_slots=True``: out and lse are then slots like the user inputs, filled per call with fresh tensors,
so every plain call still returns tensors of its own; only the split scratch is the plan's.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

import numpy as np
import torch
from triton import knobs
from triton.knobs import HookChain
from triton.runtime.autotuner import Autotuner

from . import decode, registry
from .kernels.common import INTERPRET, cache_views, capture_launches

OUTPUT_NAMES = ("out", "lse")  # with output_slots, slots filled per call after the user inputs
INPUT_INDEX = {name: i for i, name in enumerate(decode.INPUT_NAMES + OUTPUT_NAMES)}
CACHE_INPUTS = ("cache", "extra_cache")   # inputs the launchers pass as cache_views (fp8, u8, bf16)
POINTER_ALIGN = 16  # bytes: Triton specialises a pointer argument on this alignment when it compiles
_RUNTIME = knobs.runtime  # where Triton keeps its launch hooks (read per call: a profiler may add some)
_empty_like = torch.empty_like


@dataclass(frozen=True)
class InputSpec:
    """What a plan expects of one user input (a call must match it exactly)."""

    name: str
    shape: torch.Size
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    aligned: bool  # data_ptr was 16-byte aligned when planned: compiled kernels may assume it


@dataclass(frozen=True)
class BoundLaunch:
    """One kernel launch of a plan, bound once: config resolved, grid fixed, user inputs left as slots."""

    kernel: object                           # a JIT, Gluon or interpreted function (never an autotuner)
    grid: tuple[int, int, int]
    fixed: dict                              # every other argument: numbers, constexprs, options, plan buffers
    slots: tuple[tuple[str, int, int], ...]  # (argument, index in decode.INPUT_NAMES + OUTPUT_NAMES, view): view
                                             # -1 is the input itself, k >= 0 is cache_views(input)[k]


class DecodePlan:
    """A decode bound to one set of input shapes; pass it as ``sparse_mla_decode(..., plan=plan)``.

    Attributes: ``impl`` (the kernel it runs), ``requested_impl``, ``config``, ``sm_scale`` (float),
    ``device``, ``out`` [b, s_q, h, 512] bf16 and ``lse`` [b, h, s_q] fp32 (what every call returns),
    ``part_out``/``part_lse`` (split scratch, None for fused kernels), ``splits`` (one SplitPlan per scope),
    ``inputs`` (name -> InputSpec, None where the plan was made without that input), ``launches``
    (the BoundLaunch records), ``compiled`` (True when calls replay compiled kernels on the GPU) and
    ``output_slots``.

    EVERY CALL RETURNS THE SAME ``out`` AND ``lse`` TENSORS: the next call with this plan overwrites them, as a
    CUDA graph replay does. Copy the results before the next call if they must survive it.
    (Except for a plan made with ``output_slots=True``, the plain path's kind: its ``out`` and ``lse`` are None
    and each call allocates and returns new ones; the split scratch is still shared by its calls.)
    """

    def __init__(self, *, spec, requested_impl, config, sm_scale_arg, sm_scale, device, work, inputs, launches,
                 output_slots=False):
        self.impl, self.requested_impl, self.kind = spec.name, requested_impl, spec.kind
        self._spec = spec
        self.config, self.sm_scale, self._sm_scale_arg = config, sm_scale, sm_scale_arg
        self.device = device
        self.part_out, self.part_lse = work.part_out, work.part_lse
        self.splits = work.splits
        self.output_slots = output_slots
        # output_slots: the plan keeps no outputs (each call allocates its own)
        self.out, self.lse = (None, None) if output_slots else (work.out, work.lse)
        self._outputs = None if output_slots else (work.out, work.lse)
        # fresh_call allocates with empty_like of these (cheaper than torch.empty, which parses a shape, dtype and
        # device): lse's is the workspace's own (small and dense: its strides are copied), out's a one-element view
        # expanded to out's shape (never dense, so empty_like makes it contiguous; no out-sized buffer is kept)
        self._out_like = work.out.new_empty(1).expand(work.out.shape) if output_slots else None
        self._lse_like = work.lse if output_slots else None
        self.inputs = {name: inputs.get(name) for name in decode.INPUT_NAMES}
        self.launches = tuple(launches)
        # the per-call check, precomputed: (index, (shape, stride, dtype, device index), alignment mask)
        self._present = tuple((INPUT_INDEX[s.name], (s.shape, s.stride, s.dtype, _device_index(s.device)), 0)
                              for s in inputs.values())
        self._absent = tuple(i for i, name in enumerate(decode.INPUT_NAMES) if name not in inputs)
        self._interpreted = tuple((b.kernel, b.grid, b.fixed, b.slots) for b in self.launches)
        self._replay = self._replay_interpreted
        self.compiled = False

    def __repr__(self):
        return (f"DecodePlan(impl={self.impl!r}, q={tuple(self.inputs['q'].shape)}, device={self.device}, "
                f"launches={len(self.launches)}, splits={[s.num_splits for s in self.splits]}, "
                f"compiled={self.compiled})")

    def __call__(self, q, cache, indices, *, sm_scale=None, attn_sink=None, topk_length=None, extra_cache=None,
                 extra_indices=None, extra_topk_length=None, impl="auto", config=None):
        """Same as ``sparse_mla_decode(q, cache, indices, ..., plan=self)``; returns the plan's (out, lse)."""
        return self.launch(q, cache, indices, sm_scale, attn_sink, topk_length, extra_cache, extra_indices,
                           extra_topk_length, impl, config)

    def launch(self, q, cache, indices, sm_scale, attn_sink, topk_length, extra_cache, extra_indices,
               extra_topk_length, impl, config):
        """The plan path of a decode, positional for speed: check the inputs, replay, return (out, lse)."""
        if impl != "auto" and impl != self.impl and impl != self.requested_impl:
            self._reject_impl(impl)
        if config is not None and config is not self.config:
            self._check_config(config)
        if sm_scale is not None and sm_scale is not self._sm_scale_arg:
            self._check_sm_scale(sm_scale)
        inputs = (q, cache, indices, topk_length, attn_sink, extra_cache, extra_indices, extra_topk_length)
        for i in self._absent:
            if inputs[i] is not None:
                self._explain(inputs)
        ptrs = [0, 0, 0, 0, 0, 0, 0, 0]  # data_ptr per decode.INPUT_NAMES
        for i, want, align in self._present:
            t = inputs[i]
            try:
                if (t.shape, t.stride(), t.dtype, t.get_device()) != want:  # one tuple compare: the cheapest
                    self._explain(inputs)
                ptr = t.data_ptr()
            except AttributeError:  # not a tensor
                self._explain(inputs)
            if ptr & align:
                self._explain_alignment(i, ptr)
            ptrs[i] = ptr
        if self._outputs is None:  # output_slots
            return self.fresh_call(inputs, ptrs)
        self._replay(inputs, ptrs)
        return self._outputs

    def fresh_call(self, inputs: tuple, ptrs: list, stream=None):
        """Replay an ``output_slots`` plan into a new out and lse: (out, lse), tensors of this call alone.

        inputs: the 8 user inputs in decode.INPUT_NAMES order, already known to match the plan (the plain path's
        cache key, or ``launch``'s check); ptrs: their data_ptr (0 for None); stream: the current stream of the
        plan's device if the caller has it (None: asked here). Nothing is checked here.
        """
        if self.compiled:  # the launches that take no output go first: the GPU runs them while out and lse are made
            if stream is None:
                stream = self._get_stream(self._device_index)
            self._run(self._before_outputs, ptrs, stream)
            out = _empty_like(self._out_like)
            lse = _empty_like(self._lse_like)
            self._run(self._from_outputs, [*ptrs, out.data_ptr(), lse.data_ptr()], stream)
            return out, lse
        out = _empty_like(self._out_like)
        lse = _empty_like(self._lse_like)
        self._replay((*inputs, out, lse), [*ptrs, out.data_ptr(), lse.data_ptr()], stream)
        return out, lse

    # ---- replay -------------------------------------------------------------------------------------------

    def _replay_interpreted(self, inputs, ptrs, stream=None):
        """Each bound launch as ``kernel[grid](**args)``, the slots filled with the user tensors (or views).

        Holds decode.INTERPRETER_LOCK: the interpreter keeps a launch's grid state globally, so two threads must
        not run interpreted launches at once."""
        with decode.INTERPRETER_LOCK:
            views = {}
            for kernel, grid, fixed, slots in self._interpreted:
                args = dict(fixed)
                for name, i, view in slots:
                    if view < 0:
                        args[name] = inputs[i]
                    else:
                        if i not in views:
                            views[i] = cache_views(inputs[i])
                        args[name] = views[i][view]
                kernel[grid](**args)

    def _use_compiled(self, compiled_launches, get_stream):
        """Replay ``compiled_launch`` tuples from now on; user pointers must stay aligned as when planned."""
        self._compiled = tuple(compiled_launches)
        self._launchers = tuple(_launcher(c) for c in self._compiled)
        # fresh_call's split: the launches before the first that takes out or lse (a split kernel's partials)
        takes_output = [any(i >= len(decode.INPUT_NAMES) for _, i in slots) for _, _, slots, _, _ in self._launchers]
        first = takes_output.index(True) if True in takes_output else len(takes_output)
        self._before_outputs, self._from_outputs = self._launchers[:first], self._launchers[first:]
        self._get_stream = get_stream
        self._device_index = self.device.index if self.device.type == "cuda" else 0
        self._present = tuple((i, want, (POINTER_ALIGN - 1) if self.inputs[decode.INPUT_NAMES[i]].aligned else 0)
                              for i, want, _ in self._present)
        self._replay = self._replay_compiled
        self.compiled = True

    def _replay_compiled(self, inputs, ptrs, stream=None):
        """Every launch, compiled (see ``_run``)."""
        self._run(self._launchers, ptrs, self._get_stream(self._device_index) if stream is None else stream)

    @staticmethod
    def _run(launchers, ptrs, stream):
        """Each launch straight into Triton's launcher: its argument list is a copy of a template, with the stream
        and the user pointers filled in."""
        enter, leave = _RUNTIME.launch_enter_hook, _RUNTIME.launch_exit_hook
        if (enter is None or (type(enter) is HookChain and not enter.calls)) and (
                leave is None or (type(leave) is HookChain and not leave.calls)):  # no profiler hook: skip them
            for call, template, slots, _, _ in launchers:
                args = template.copy()
                args[3] = stream
                for pos, i in slots:
                    args[pos] = ptrs[i]
                call(*args)
            return
        for call, template, slots, base, compiled in launchers:  # profiler hooks set
            args = template.copy()
            args[3] = stream
            for pos, i in slots:
                args[pos] = ptrs[i]
            args[base - 3:base] = compiled.launch_metadata(tuple(args[:3]), stream, *args[base:]), enter, leave
            call(*args)

    # ---- mismatch messages (off the fast path) ----------------------------------------------------------

    def _reject_impl(self, impl):
        raise ValueError(f"impl: the plan runs {self.impl!r} (planned as impl={self.requested_impl!r}), got "
                         f"{impl!r}; leave impl out or make a new plan")

    def _check_config(self, config):
        if self.config is None:
            raise ValueError(f"config: the plan was made without a config (its kernels are bound to the "
                             f"autotuner's choice), got {config!r}; leave config out or make a new plan")
        if config == self.config:
            return
        try:  # the same config written another way (a dict with defaults left out, a triton.Config, typed)
            same = self._spec.check_config(config) == self._spec.check_config(self.config)
        except (TypeError, ValueError):
            same = False
        if not same:
            raise ValueError(f"config: the plan's is {self.config!r}, got {config!r}; leave config out or make a "
                             f"new plan")

    def _check_sm_scale(self, sm_scale):
        if isinstance(sm_scale, torch.Tensor) and sm_scale.device.type != "cpu":
            raise ValueError(f"sm_scale: a {sm_scale.device} tensor cannot be compared with the plan's "
                             f"({self.sm_scale}) without a host synchronisation; leave sm_scale out")
        try:
            value = float(sm_scale)
        except (TypeError, ValueError):
            value = None
        if value != self.sm_scale:
            raise ValueError(f"sm_scale: the plan's is {self.sm_scale}, got {sm_scale!r}; leave sm_scale out or "
                             f"make a new plan")

    def _explain(self, inputs):
        """Raise a ValueError naming the first input that does not match the plan."""
        for name, t in zip(decode.INPUT_NAMES, inputs):
            want = self.inputs[name]
            if want is None:
                if t is not None:
                    raise ValueError(f"{name}: the plan was made without it (None), got a "
                                     f"{type(t).__name__}; make a new plan for calls that pass {name}")
                continue
            if t is None:
                raise ValueError(f"{name}: the plan expects a tensor of shape {tuple(want.shape)} {want.dtype}, "
                                 f"got None; make a new plan for calls without {name}")
            if not isinstance(t, torch.Tensor):
                raise ValueError(f"{name}: the plan expects a tensor of shape {tuple(want.shape)} {want.dtype}, "
                                 f"got a {type(t).__name__}")
            if t.shape != want.shape:
                raise ValueError(f"{name}: the plan expects shape {tuple(want.shape)}, got {tuple(t.shape)}")
            if t.dtype is not want.dtype:
                raise ValueError(f"{name}: the plan expects dtype {want.dtype}, got {t.dtype}")
            if t.stride() != want.stride:
                raise ValueError(f"{name}: the plan expects strides {want.stride}, got {t.stride()}")
            if t.get_device() != _device_index(want.device):
                raise ValueError(f"{name}: the plan expects device {want.device}, got {t.device}")
        raise AssertionError("_explain found no mismatch")

    def _explain_alignment(self, i, ptr):
        name = decode.INPUT_NAMES[i]
        raise ValueError(f"{name}: the plan's kernels were compiled for a {POINTER_ALIGN}-byte aligned data_ptr, "
                         f"got one {ptr % POINTER_ALIGN} bytes past alignment; make a new plan for it")


def _device_index(device: torch.device) -> int:
    """What ``Tensor.get_device()`` returns for a tensor on ``device`` (-1 on the CPU)."""
    return -1 if device.type == "cpu" else (device.index or 0)


def plan_decode(q, cache, indices, *, sm_scale=None, attn_sink=None, topk_length=None, extra_cache=None,
                extra_indices=None, extra_topk_length=None, impl="auto", config=None) -> DecodePlan:
    """Plan a decode for inputs like these; then call ``sparse_mla_decode(..., plan=plan)`` per step.

    The arguments are those of :func:`workbench.sparse_mla_decode`; the tensors are examples: later calls must
    pass tensors of the same shapes, dtypes, strides and device, and the same optional inputs (None or not).
    Their contents (q, the cache bytes, indices, topk_length, attn_sink) may change freely between calls;
    sm_scale, impl and config are fixed by the plan (sm_scale is read once, here: it must be a Python or numpy
    scalar, not a tensor, whose later in-place changes the plan could not see), and so is how the combine is
    launched (:func:`workbench.decode.combine_pdl`, decided here: a ``combine_launch`` block around a later call
    changes nothing).
    q, indices and extra_indices must have a last stride of 1 (the plain path would copy them each call).
    Without a config, each autotuned launch is resolved here to the config the autotuner picks for these
    shapes: on the GPU that runs the decode once for real (it tunes, or reads Triton's tuning cache).

    Returns a :class:`DecodePlan`. Every call with it returns ``(plan.out, plan.lse)``, the same two tensors,
    overwritten by the next call.
    """
    if isinstance(sm_scale, (torch.Tensor, np.ndarray)):
        raise ValueError(f"sm_scale: a plan reads sm_scale once, when it is made, and would miss later in-place "
                         f"changes to this {type(sm_scale).__name__}; pass a Python float (float(sm_scale))")
    user = dict(q=q, cache=cache, indices=indices, topk_length=topk_length, attn_sink=attn_sink,
                extra_cache=extra_cache, extra_indices=extra_indices, extra_topk_length=extra_topk_length)
    return make_plan(user, sm_scale=sm_scale, impl=impl, config=config)


def make_plan(user: dict, *, sm_scale, impl, config, output_slots=False) -> DecodePlan:
    """``build_plan`` for the device of ``user["q"]``: compiled launches on a GPU (not interpreting), made under
    that device; interpreted ones otherwise. ``plan_decode`` and the plain path's plan cache both come here."""
    q = user["q"]
    compiled = isinstance(q, torch.Tensor) and q.device.type == "cuda" and not INTERPRET
    if not compiled:
        return build_plan(user, sm_scale=sm_scale, impl=impl, config=config, output_slots=output_slots)
    from triton.runtime import driver
    with torch.cuda.device(q.device):
        return build_plan(user, sm_scale=sm_scale, impl=impl, config=config, compile_launch=compile_launch,
                          get_stream=driver.active.get_current_stream, output_slots=output_slots)


def build_plan(user: dict, *, sm_scale, impl, config, compile_launch=None, get_stream=None,
               output_slots=False) -> DecodePlan:
    """The plan for ``user`` (decode.INPUT_NAMES -> tensor or None).

    compile_launch(kernel, grid, args) -> compiled kernel (``.run``, ``.function``, ``.packed_metadata``,
    ``.launch_metadata``): when given, calls replay compiled launches with ``get_stream(device_index)``;
    otherwise they replay ``kernel[grid](**args)``. Tests pass a stub to exercise the compiled replay on the CPU.
    output_slots: out and lse are bound as slots (``OUTPUT_NAMES``) filled per call, not plan buffers: each call
    returns new tensors (``DecodePlan.fresh_call``), as the plain path must.
    """
    spec, sm_scale_value = decode.resolve_call(**user, sm_scale=sm_scale, impl=impl)
    if spec.kind not in ("split", "fused"):
        raise ValueError(f"impl: {spec.name!r} launches no kernels to plan; plan one of "
                         f"{registry.names('split', 'fused')} (or 'auto')")
    q = user["q"]
    decode._check_runnable(q, impl)
    for name in decode.ROW_INPUTS:  # the plain path copies these when their last stride is not 1
        t = user[name]
        if t is not None and t.stride(-1) != 1:
            raise ValueError(f"{name}: a plan needs stride(-1) == 1 (the plain path copies such a tensor on every "
                             f"call), got strides {t.stride()}; pass {name}.contiguous()")
    scopes = decode.decode_scopes(user["cache"], user["indices"], user["topk_length"], user["extra_cache"],
                                  user["extra_indices"], user["extra_topk_length"])
    work = decode.allocate_workspace(spec, q, scopes)
    owned = (work.part_out, work.part_lse) if output_slots else (work.out, work.lse, work.part_out, work.part_lse)
    buffers = {t.data_ptr() for t in owned if t is not None}
    outputs = dict(zip(OUTPUT_NAMES, (work.out, work.lse))) if output_slots else {}
    stages = decode.launch_stages(spec, q=q, scopes=scopes, attn_sink=user["attn_sink"], sm_scale=sm_scale_value,
                                  config=config, work=work)
    bound, compiled = [], []
    for stage in stages:
        with capture_launches() as records:
            stage.run()
        scope = {name: user[name] for name in stage.inputs if user[name] is not None}
        scope.update(outputs)  # output slots: any launch may write (or pass) out and lse
        with decode.interpreter_lock():  # an autotuner is run once for real here
            for kernel, grid, args in records:
                kernel, grid, args = resolve_launch(kernel, grid, args)
                slots = bind_slots(kernel, args, scope, buffers)
                slot_names = {name for name, _, _ in slots}
                bound.append(BoundLaunch(kernel, grid, {k: v for k, v in args.items() if k not in slot_names},
                                         slots))
                if compile_launch is not None:
                    compiled.append(compiled_launch(compile_launch(kernel, grid, args), kernel, grid, args, slots))
    inputs = {name: InputSpec(name, t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % POINTER_ALIGN == 0)
              for name, t in user.items() if t is not None}
    plan = DecodePlan(spec=spec, requested_impl=impl, config=config, sm_scale_arg=sm_scale, sm_scale=sm_scale_value,
                      device=q.device, work=work, inputs=inputs, launches=bound, output_slots=output_slots)
    if compile_launch is not None:
        plan._use_compiled(compiled, get_stream)
    return plan


def resolve_launch(kernel, grid, args):
    """A recorded launch as (JIT function, 3-d grid, every argument with the config's): autotuners resolved.

    An autotuner runs once for real here (tuning, or a hit in Triton's tuning cache); its choice for these
    arguments is ``best_config``, bound from now on. A callable grid is evaluated with the config merged in.
    """
    while isinstance(kernel, Autotuner):
        kernel[grid](**args)
        cfg = kernel.best_config
        if cfg.pre_hook is not None:
            raise NotImplementedError(f"{kernel.fn}: a config with a pre_hook cannot be bound into a plan")
        kernel, args = kernel.fn, {**args, **cfg.all_kwargs()}
    if callable(grid):
        grid = grid(args)
    grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
    return kernel, grid, args


def bind_slots(kernel, args: dict, scope: dict, buffers: set) -> tuple:
    """Which tensor arguments of one launch come from a user input: ((argument, input index, view), ...).

    A tensor argument is matched by data_ptr against the user inputs this launch's stage reads (``scope``, with
    out and lse for an ``output_slots`` plan); cache_views share their cache's data_ptr. Where two inputs share it
    (one tensor passed as cache and extra_cache, say), the argument's name tells: a launcher names the extra
    scope's arguments ``x_``. Anything else must be a plan buffer, or the plan would replay a stale temporary.
    """
    slots = []
    for arg, value in args.items():
        if not isinstance(value, torch.Tensor):
            continue
        ptr = value.data_ptr()
        owners = [name for name, t in scope.items() if t.data_ptr() == ptr]
        if len(owners) > 1:
            owners = [name for name in owners if name.startswith("extra_") == arg.startswith("x_")] or owners
        if len(owners) > 1:
            raise ValueError(f"{' and '.join(owners)}: share data_ptr {ptr:#x}, and {_kernel_name(kernel)} reads "
                             f"them in one launch, so a plan cannot tell which one its argument {arg!r} is; "
                             f"plan with distinct tensors")
        if owners:
            name = owners[0]
            slots.append((arg, INPUT_INDEX[name], _view_index(name, scope[name], value, kernel, arg)))
        elif ptr not in buffers:
            raise RuntimeError(f"{_kernel_name(kernel)} argument {arg!r} is neither a user input nor a plan buffer "
                               f"(a temporary made by its launcher?): a plan cannot replay it")
    return tuple(slots)


def _same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.data_ptr() == b.data_ptr() and a.dtype == b.dtype and a.shape == b.shape
            and a.stride() == b.stride())


def _view_index(name, user, value, kernel, arg) -> int:
    """-1 when ``value`` is the user input itself, k when it is cache_views(user)[k]."""
    if _same_view(value, user):
        return -1
    if name in CACHE_INPUTS:
        for k, view in enumerate(cache_views(user)):
            if _same_view(value, view):
                return k
    raise RuntimeError(f"{_kernel_name(kernel)} argument {arg!r} shares {name}'s data_ptr but is neither {name} "
                       f"nor one of its cache_views: a plan cannot rebuild it per call")


def _kernel_name(kernel) -> str:
    fn = getattr(kernel, "fn", kernel)
    return getattr(fn, "__name__", repr(kernel))


def compile_launch(kernel, grid, args):
    """Compile (or fetch from Triton's cache) one bound launch for the current device, as JITFunction.run would."""
    compiled = kernel.run(grid=grid, warmup=True, **args)
    if hasattr(compiled, "result"):  # Triton's async compile mode hands back a future
        compiled = compiled.result()
    return compiled


def compiled_launch(compiled, kernel, grid, args, slots) -> tuple:
    """The replay tuple of one launch: (run, function, packed_metadata, grid x3, argument template, slots, kernel).

    The template is every parameter's value in signature order, as JITFunction.run passes them; plan buffers
    become their data_ptr (the C launcher takes an int for a pointer), user inputs become (position, input
    index) slots filled per call.
    """
    run = compiled.run  # first access loads the binary and sets .function
    slot_input = {name: i for name, i, _ in slots}
    template, positions = [], []
    for pos, param in enumerate(inspect.signature(kernel.fn).parameters.values()):
        if param.name in args:
            value = args[param.name]
        elif param.default is not inspect.Parameter.empty:
            value = param.default
        else:
            raise RuntimeError(f"{_kernel_name(kernel)}: the launch passes no {param.name!r}")
        if param.name in slot_input:
            positions.append((pos, slot_input[param.name]))
            value = 0
        elif isinstance(value, torch.Tensor):
            value = value.data_ptr()
        template.append(value)
    return (run, compiled.function, compiled.packed_metadata, *grid, template, tuple(positions), compiled)


def _launcher(launch: tuple) -> tuple:
    """A ``compiled_launch`` tuple as the replay runs it: (callable, argument template, slots, base, compiled).

    The template is the whole argument list of the callable, the stream (index 3) and the slots (absolute
    positions) filled per call; base is where the kernel's own arguments start, after the launch metadata and the
    two hooks. Triton's CudaLauncher is a Python wrapper that, for a kernel without global or profile scratch,
    only adds its cooperative-grid and PDL flags and two None scratch pointers before calling the C launch: that
    call is made here directly, its flags in the template, which saves a Python frame and a closure per launch.
    Any other launcher (another backend, a kernel with scratch, a test's stub) is called as ``run(...)``.
    """
    run, function, packed, g0, g1, g2, template, slots, compiled = launch
    direct = _c_launch(run)
    if direct is not None:
        head = [g0, g1, g2, None, function, run.launch_cooperative_grid, run.launch_pdl, None, None, packed,
                None, None, None]
        call = direct
    else:
        head = [g0, g1, g2, None, function, packed, None, None, None]
        call = run
    base = len(head)
    return call, head + list(template), tuple((base + pos, i) for pos, i in slots), base, compiled


def _c_launch(run):
    """The C launch function a CudaLauncher ``run`` calls, when calling it directly is what ``run(...)`` does."""
    try:
        from triton.backends.nvidia.driver import CudaLauncher
    except ImportError:  # pragma: no cover - a Triton without the NVIDIA backend
        return None
    if type(run) is not CudaLauncher or run.global_scratch_size > 0 or run.profile_scratch_size > 0:
        return None  # a kernel with scratch needs the launcher's allocator, per launch
    return run.launch


decode.use_plan_maker(make_plan)  # the plain path's plan cache makes its plans here
