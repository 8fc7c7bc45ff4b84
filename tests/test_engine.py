"""The workbench inside a serving engine: the FlashMLA drop-in (``workbench.flash_mla``) called the way an engine
calls FlashMLA, on FlashMLA's golden cases; the features it refuses; and the torch operator (``workbench.ops``)
under ``torch.library.opcheck`` and ``torch.compile(fullgraph=True)``.

Under the interpreter a decode's time goes with heads x splits, so the golden cases run a block of 16 heads
(heads are independent: the block's outputs are FlashMLA's for those heads) and the operator a tiny case.
"""
import pytest
import torch
from torch._dynamo.utils import counters

import workbench as wb
from workbench import flash_mla as fm
from workbench.format.golden import golden_expected, golden_names, load_golden
from workbench.format.layout import MODEL1

interpreter = pytest.mark.interpreter
HEADS = slice(8, 24)  # the block of heads the golden cases run


def engine_cache(g: dict, scope: str = "", dtype=torch.uint8) -> torch.Tensor:
    """The 4-D k_cache an engine hands FlashMLA: a buffer of whole pages (page stride ``cache_block_stride``)
    holding FlashMLA's own bytes from the golden file, viewed [num_blocks, block_size, 1, 584]."""
    data = g[f"{scope}cache_bytes"]
    nb, bs = data.shape[0], g[f"{scope}block_size"]
    pages = torch.zeros(nb, g[f"{scope}cache_block_stride"], dtype=torch.uint8)
    pages[:, : bs * MODEL1.bytes_per_token] = data
    return pages.view(dtype)[:, : bs * MODEL1.bytes_per_token].view(nb, bs, 1, MODEL1.bytes_per_token)


def flashmla_args(g: dict, heads: slice = HEADS, dtype=torch.uint8) -> tuple:
    """FlashMLA's positional arguments for a golden case, in the order FlashMLA's tests pass them
    (tests/lib.py run_flash_mla_decode), for a block of heads; block_table and cache_seqlens as an engine has them."""
    q = g["q"][:, :, heads]  # a view, as an engine may pass it
    sink = None if g["attn_sink"] is None else g["attn_sink"][heads]
    seqlens = torch.full((q.shape[0],), g["block_table"].shape[1] * g["block_size"], dtype=torch.int32)
    extra = "extra_indices" in g
    meta, num_splits = fm.get_mla_metadata()
    return (q, engine_cache(g, dtype=dtype), g["block_table"], seqlens, 512, meta, num_splits, g["sm_scale"], False,
            True, g["indices"], sink, engine_cache(g, "extra_", dtype) if extra else None,
            g["extra_indices"] if extra else None, g["topk_length"], g["extra_topk_length"] if extra else None)


def check_like_flashmla(g: dict, out, lse, heads: slice = HEADS, what: str = ""):
    """out and lse as FlashMLA returned them for these heads: shapes, dtypes, lse's memory layout, +inf where
    FlashMLA has +inf, and the values within the workbench's tolerances."""
    fl_out, fl_lse = g["flashmla_out"][:, :, heads], g["flashmla_lse"][:, heads]
    assert (out.shape, out.dtype) == (fl_out.shape, fl_out.dtype), what
    assert (lse.shape, lse.dtype) == (fl_lse.shape, fl_lse.dtype), what  # [b, h, s_q] fp32
    # FlashMLA returns its [b, s_q, h] lse transposed; the golden file keeps those strides
    assert g["flashmla_lse"].transpose(1, 2).is_contiguous() and lse.transpose(1, 2).is_contiguous(), lse.stride()
    assert torch.equal(torch.isposinf(lse), torch.isposinf(fl_lse)), f"{what}: +inf (no valid token) differs"
    wb.assert_close(out.float(), lse, *golden_expected(g, heads=heads), what)


@interpreter
@pytest.mark.parametrize("name", golden_names())
def test_drop_in_matches_flashmla_golden(name):
    g = load_golden(name)
    out, lse = fm.flash_mla_with_kvcache(*flashmla_args(g))
    check_like_flashmla(g, out, lse, what=f"drop-in {name}")


def test_golden_cases_cover_the_lse_conventions():
    """What the golden test checks is there to check: a query with no valid token (+inf), s_q > 1 (where lse's
    layout is not that of a contiguous [b, h, s_q])."""
    lses = {n: load_golden(n)["flashmla_lse"] for n in golden_names()}
    assert any(torch.isposinf(lse[:, HEADS]).any() for lse in lses.values())
    assert any(lse.shape[2] > 1 and not lse.is_contiguous() for lse in lses.values())


@interpreter
def test_drop_in_takes_fp8_cache_and_keywords():
    """A float8_e4m3fn k_cache (vLLM's dtype), every argument by FlashMLA's keyword, the sgl-flash-mla extras at
    their supported values."""
    g = load_golden("v4_b2_h64_k64_bs64")
    heads = slice(0, 8)
    meta, num_splits = fm.get_mla_metadata()
    out, lse = fm.flash_mla_with_kvcache(
        q=g["q"][:, :, heads], k_cache=engine_cache(g, dtype=torch.float8_e4m3fn), block_table=None,
        cache_seqlens=None, head_dim_v=512, tile_scheduler_metadata=meta, num_splits=num_splits,
        softmax_scale=None, causal=False, is_fp8_kvcache=None, indices=g["indices"], attn_sink=None,
        extra_k_cache=None, extra_indices_in_kvcache=None, topk_length=None, extra_topk_length=None,
        enable_batch_invariant=False, use_legacy=True, kv_format=None, descale_q=None, descale_k=None)
    assert g["sm_scale"] == 512 ** -0.5  # softmax_scale=None is FlashMLA's q.shape[-1] ** -0.5
    check_like_flashmla(g, out, lse, heads=heads, what="drop-in fp8 cache")


@pytest.fixture(scope="module")
def tiny():
    """A tiny decode case (CPU): 2 sequences, 4 heads, topk 16, 64-token pages, a sink and topk_length."""
    return wb.build_case(batch=2, heads=4, topk=16, block_size=64, sink=True, topk_length=True, seed=1)


def tiny_flashmla_kwargs(case) -> dict:
    meta, num_splits = fm.get_mla_metadata()
    return dict(q=case.q, k_cache=case.main.cache, block_table=None, cache_seqlens=None, head_dim_v=512,
                tile_scheduler_metadata=meta, num_splits=num_splits, softmax_scale=case.sm_scale, causal=False,
                is_fp8_kvcache=True, indices=case.main.indices, attn_sink=case.attn_sink,
                topk_length=case.main.topk_length)


def test_get_mla_metadata_is_flashmlas_pair():
    """(FlashMLASchedMeta(), None), whatever the arguments (the older interface passed six)."""
    for args in [(), (torch.tensor([5, 7], dtype=torch.int32), 64, 1, 64, True, 128)]:
        meta, num_splits = fm.get_mla_metadata(*args)
        assert isinstance(meta, fm.FlashMLASchedMeta) and num_splits is None
        assert (meta.have_initialized, meta.tile_scheduler_metadata, meta.num_splits) == (False, None, None)


@interpreter
def test_scheduler_arguments_are_accepted_and_unused(tiny):
    """Whatever comes back through tile_scheduler_metadata and num_splits (this module's pair, the older
    interface's tensors, a shared instance), and block_table/cache_seqlens, the result is the same."""
    kw = tiny_flashmla_kwargs(tiny)
    ref_out, ref_lse = fm.flash_mla_with_kvcache(**kw)
    old_style = dict(tile_scheduler_metadata=torch.zeros(8, 8, dtype=torch.int32),
                     num_splits=torch.zeros(3, dtype=torch.int32),
                     block_table=torch.zeros(2, 4, dtype=torch.int32), cache_seqlens=torch.ones(2, dtype=torch.int32))
    out, lse = fm.flash_mla_with_kvcache(**{**kw, **old_style})
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)
    assert not (out.data_ptr() == ref_out.data_ptr() or lse.data_ptr() == ref_lse.data_ptr())  # new tensors


UNSUPPORTED = {  # argument -> a value the drop-in refuses
    "indices": None,                                   # dense decode
    "causal": True,
    "is_fp8_kvcache": False,
    "head_dim_v": 576,
    "k_cache": "v3.2",                                 # 656 bytes a token (built in the test)
    "enable_batch_invariant": True,
    "kv_format": "model1",
    "descale_q": torch.ones(1),
    "descale_k": torch.ones(1),
}


@pytest.mark.parametrize("arg", list(UNSUPPORTED), ids=list(UNSUPPORTED))
def test_unsupported_feature_raises_naming_it(tiny, arg):
    value = UNSUPPORTED[arg]
    if arg == "k_cache":
        value = torch.zeros(4, 64, 1, 656, dtype=torch.uint8)
    with pytest.raises(NotImplementedError, match=rf"^{arg}: "):
        fm.flash_mla_with_kvcache(**{**tiny_flashmla_kwargs(tiny), arg: value})


BAD = {  # id -> (arguments changed, error, message start: FlashMLA's argument names)
    "k_cache_width": (lambda c: dict(k_cache=torch.zeros(4, 64, 1, 600, dtype=torch.uint8)), ValueError,
                      "k_cache: "),
    "k_cache_dtype": (lambda c: dict(k_cache=torch.zeros(4, 64, 1, 584, dtype=torch.int32)), TypeError,
                      "k_cache: "),
    "q_dtype": (lambda c: dict(q=c.q.float()), TypeError, "q: "),
    "extra_without_indices": (lambda c: dict(extra_k_cache=c.main.cache), ValueError,
                              "extra_k_cache and extra_indices_in_kvcache: "),
    "softmax_scale": (lambda c: dict(softmax_scale=-1.0), ValueError, "softmax_scale: "),
}


@pytest.mark.parametrize("bad", list(BAD), ids=list(BAD))
def test_bad_argument_raises_under_flashmlas_name(tiny, bad):
    change, error, start = BAD[bad]
    with pytest.raises(error, match="^" + start):
        fm.flash_mla_with_kvcache(**{**tiny_flashmla_kwargs(tiny), **change(tiny)})


# The operator


OP = torch.ops.workbench.sparse_mla_decode


def op_args(case) -> tuple[tuple, dict]:
    kw = case.kwargs()
    return (kw.pop("q"), kw.pop("cache"), kw.pop("indices")), kw


def test_importing_workbench_registers_the_op():
    assert str(OP.default._schema) == (
        "workbench::sparse_mla_decode(Tensor q, Tensor cache, Tensor indices, float? sm_scale=None, "
        "Tensor? attn_sink=None, Tensor? topk_length=None, Tensor? extra_cache=None, Tensor? extra_indices=None, "
        "Tensor? extra_topk_length=None, str impl=\"auto\") -> (Tensor, Tensor)")


@interpreter
@pytest.mark.filterwarnings("ignore:cache. a copy of a cache that lost its page padding:UserWarning")
def test_op_passes_opcheck(tiny):
    """opcheck's default tests (schema, autograd registration, fake tensor, AOT dispatch with dynamic shapes);
    its AOT test decodes from torch.clone'd inputs, whose cache has lost its page padding (the op re-pads a copy)."""
    args, kw = op_args(tiny)
    result = torch.library.opcheck(OP.default, args, kw)
    assert set(result.values()) == {"SUCCESS"}, result


@interpreter
def test_op_has_no_gradient(tiny):
    """Autograd is registered (custom_op's own: opcheck's registration test runs with an input that requires
    grad), and there is no backward: gradients are not supported."""
    (q, cache, indices), kw = op_args(tiny)
    q = q.clone().requires_grad_(True)
    result = torch.library.opcheck(OP.default, (q, cache, indices), kw, test_utils="test_autograd_registration")
    assert result == {"test_autograd_registration": "SUCCESS"}
    out, _ = OP(q, cache, indices, **kw)
    with pytest.raises(RuntimeError, match="no autograd formula"):
        out.float().sum().backward()


@interpreter
def test_op_decodes_a_copied_cache_from_a_padded_copy(tiny):
    """torch.clone packs the cache's pages (stride(0) == block_size*584), which the decode refuses; the op
    warns and decodes from a copy in the page layout, bit for bit the same."""
    args, kw = op_args(tiny)
    out, lse = OP(*args, **kw)
    packed = args[1].clone()
    assert packed.stride(0) == 64 * MODEL1.bytes_per_token
    with pytest.warns(UserWarning, match="^cache: a copy of a cache that lost its page padding"):
        out2, lse2 = OP(args[0], packed, *args[2:], **kw)
    assert torch.equal(out2, out) and torch.equal(lse2, lse)


@interpreter
def test_op_compiles_without_graph_break():
    """torch.compile(fullgraph=True) traces a function around the op (both KV scopes given) in one graph, and
    the compiled function gives the eager result, bit for bit."""
    case = wb.build_case(batch=2, heads=4, topk=16, block_size=64, sink=True, topk_length=True, extra_topk=16,
                         extra_topk_length=True, seed=2)
    args, kw = op_args(case)

    def decode(q, cache, indices, attn_sink, topk_length, extra_cache, extra_indices, extra_topk_length):
        out, lse = OP(q * 1, cache, indices, sm_scale=case.sm_scale, attn_sink=attn_sink, topk_length=topk_length,
                      extra_cache=extra_cache, extra_indices=extra_indices, extra_topk_length=extra_topk_length)
        return out, lse.exp()  # traced work on both sides of the op

    inputs = (*args, kw["attn_sink"], kw["topk_length"], kw["extra_cache"], kw["extra_indices"],
              kw["extra_topk_length"])
    torch._dynamo.reset()
    counters.clear()
    eager = decode(*inputs)
    compiled = torch.compile(decode, fullgraph=True, backend="aot_eager")(*inputs)
    assert counters["stats"]["unique_graphs"] == 1
    for e, c in zip(eager, compiled):
        assert torch.equal(c, e)


@interpreter
def test_drop_in_compiles_without_graph_break(tiny):
    """An engine's compiled forward around the drop-in: one graph (the drop-in calls the op when compiling), the
    eager drop-in's results, bit for bit, lse in FlashMLA's layout."""
    kw = tiny_flashmla_kwargs(tiny)
    tensors = {k: v for k, v in kw.items() if isinstance(v, torch.Tensor)}
    rest = {k: v for k, v in kw.items() if k not in tensors}

    def forward(**t):
        return fm.flash_mla_with_kvcache(**t, **rest)

    torch._dynamo.reset()
    counters.clear()
    eager = forward(**tensors)
    compiled = torch.compile(forward, fullgraph=True, backend="aot_eager")(**tensors)
    assert counters["stats"]["unique_graphs"] == 1
    for e, c in zip(eager, compiled):
        assert torch.equal(c, e)
    assert compiled[1].transpose(1, 2).is_contiguous()


@pytest.mark.gpu
def test_compiled_module_gives_the_eager_output_bit_for_bit_on_the_gpu():
    """On the GPU, an engine's module around the op compiled by inductor (fullgraph) returns what eager does,
    bit for bit, on a hostile case (sink, topk_length, both scopes)."""
    from workbench.bench.providers import DecodeModule
    case = wb.build_case(batch=4, heads=64, topk=512, block_size=64, sink=True, topk_length=True, extra_topk=128,
                         extra_topk_length=True, seed=3, device="cuda")
    kw = case.kwargs()
    args = {k: kw.get(k) for k in ("q", "cache", "indices", "attn_sink", "topk_length", "extra_cache",
                                    "extra_indices", "extra_topk_length")}
    module = DecodeModule("auto", case.sm_scale)
    eager = module(**args)
    torch._dynamo.reset()
    compiled = torch.compile(module, fullgraph=True)(**args)
    for e, c in zip(eager, compiled):
        assert torch.equal(c, e)
