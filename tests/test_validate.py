"""Bad input fails early with a message naming the argument."""
import numpy as np
import pytest
import torch

import workbench as wb
from workbench import registry
from workbench.format.cases import build_case


@pytest.fixture(scope="module")
def case():
    return build_case(batch=2, heads=4, topk=8, block_size=64, sink=True, topk_length=True, extra_topk=4)


def _with(case, **over):
    kw = case.kwargs()
    kw.update(over)
    return kw


def _bad_cases(case):
    c = case.main.cache
    q = case.q
    contiguous = torch.zeros(c.shape[0], c.shape[1], 1, 584, dtype=torch.uint8)  # stride0 = 64*584, not 576-aligned
    return [
        ("q-fp16", dict(q=q.half()), TypeError, "q"),
        ("q-not-tensor", dict(q=q.tolist()), TypeError, "q"),
        ("q-dim-511", dict(q=q[..., :511]), ValueError, "q"),
        ("q-3d", dict(q=q[0]), ValueError, "q"),
        ("cache-int8", dict(cache=c.view(torch.int8)), TypeError, "cache"),
        ("cache-last-576", dict(cache=c[..., :576]), ValueError, "cache"),
        ("cache-contiguous-strides", dict(cache=contiguous), ValueError, "cache"),
        ("indices-int64", dict(indices=case.main.indices.long()), TypeError, "indices"),
        ("indices-wrong-batch", dict(indices=case.main.indices[:1]), ValueError, "indices"),
        ("sink-wrong-length", dict(attn_sink=torch.zeros(3)), ValueError, "attn_sink"),
        ("sink-bf16", dict(attn_sink=torch.zeros(4, dtype=torch.bfloat16)), TypeError, "attn_sink"),
        ("topk-length-shape", dict(topk_length=torch.zeros(3, dtype=torch.int32)), ValueError, "topk_length"),
        ("extra-cache-alone", dict(extra_indices=None), ValueError, "extra_cache and extra_indices"),
        ("extra-indices-shape", dict(extra_indices=case.extra.indices[:, :, :, None]), ValueError, "extra_indices"),
        ("sm-scale-negative", dict(sm_scale=-1.0), ValueError, "sm_scale"),
        ("sm-scale-nan", dict(sm_scale=np.float32("nan")), ValueError, "sm_scale"),
        ("sm-scale-1d-tensor", dict(sm_scale=torch.tensor([0.1])), ValueError, "sm_scale"),
        ("cache-storage-ends-at-last-token", dict(cache=_ends_at_last_token(c)), ValueError, "cache"),
        ("indices-other-device", dict(indices=case.main.indices.to("meta")), ValueError, "indices"),
        ("sink-other-device", dict(attn_sink=case.attn_sink.to("meta")), ValueError, "attn_sink"),
        ("extra-cache-other-device", dict(extra_cache=case.extra.cache.to("meta")), ValueError, "extra_cache"),
    ]


def _ends_at_last_token(cache):
    """The same pages in a storage that stops at the last token's byte (no padding after the last page)."""
    nb, bs, s0 = cache.shape[0], cache.shape[1], cache.stride(0)
    flat = cache.as_strided((nb * s0,), (1,))[: (nb - 1) * s0 + bs * 584].clone()
    return flat.as_strided(cache.shape, cache.stride())


@pytest.mark.parametrize("impl", ["reference", "mma", "simt"])
def test_bad_inputs_name_the_argument(case, impl):
    for label, over, exc, name in _bad_cases(case):
        with pytest.raises(exc, match=name) as info:
            wb.sparse_mla_decode(**_with(case, **over), impl=impl)
        assert name.split()[0] in str(info.value), label


def test_reference_checks_too(case):
    with pytest.raises(TypeError, match="q"):
        wb.sparse_mla_decode_reference(**_with(case, q=case.q.float()))


def test_unknown_impl(case):
    with pytest.raises(ValueError, match="impl"):
        wb.sparse_mla_decode(**case.kwargs(), impl="cutlass")


@pytest.mark.parametrize("impl,config,match", [
    ("mma", {"BLOCK_H": 48, "BLOCK_T": 16}, "BLOCK_H=48"),
    ("mma", {"BLOCK_H": 16, "BLOCK_T": 128}, "BLOCK_T=128"),
    ("mma", {"BLOCK_H": 16}, "missing"),
    ("mma", {"BLOCK_H": 16, "BLOCK_T": 16, "BLOCK_K": 4}, "unknown"),
    ("simt", {"BLOCK_T": 16, "num_warps": 3}, "num_warps=3"),
    ("reference", {"BLOCK_T": 16}, "reference has no kernel config"),
], ids=["mma-blockh48", "mma-blockt128", "mma-missing", "mma-unknown-key", "simt-3-warps", "reference"])
def test_unsupported_config(case, impl, config, match):
    with pytest.raises(ValueError, match=match):
        wb.sparse_mla_decode(**case.kwargs(), impl=impl, config=config)


GLUON_RUNGS = [n for n in registry.names("split") if not registry.get(n).interpretable]


@pytest.mark.interpreter  # CPU tensors reach the launcher only where Triton interprets
@pytest.mark.parametrize("impl", GLUON_RUNGS)
def test_a_gluon_rung_off_sm90_names_itself(case, impl):
    """Each Gluon rung's launcher refuses a tensor off the GPUs it runs on (sm_90; the portable rungs sm_90 and
    newer) by the rung's own name, not 'wgmma'."""
    with pytest.raises(RuntimeError, match=rf"impl={impl!r} is a (Hopper \(sm_90\)|portable) Gluon kernel"):
        wb.sparse_mla_decode(**case.kwargs(), impl=impl)


def test_config_over_shared_memory_limit_is_refused(case, monkeypatch):
    from workbench.kernels import tuning
    with tuning.target_override("sm_120"):
        with pytest.raises(ValueError, match="shared memory"):
            wb.sparse_mla_decode(**case.kwargs(), impl="mma",
                                 config={"BLOCK_H": 64, "BLOCK_T": 64, "num_warps": 8, "num_stages": 2})


@pytest.mark.parametrize("scale", [np.float32(0.0625), np.float64(0.0625), torch.tensor(0.0625), np.array(0.0625),
                                   1 / 16], ids=["np.float32", "np.float64", "0-dim-tensor", "0-dim-array", "float"])
def test_sm_scale_accepts_any_real_scalar(case, scale):
    want = wb.sparse_mla_decode(**_with(case, sm_scale=0.0625), impl="reference")
    got = wb.sparse_mla_decode(**_with(case, sm_scale=scale), impl="reference")
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_device_mismatch_names_the_argument_and_both_devices(case):
    with pytest.raises(ValueError) as info:
        wb.sparse_mla_decode(**_with(case, topk_length=case.main.topk_length.to("meta")), impl="reference")
    msg = str(info.value)
    assert msg.startswith("topk_length:") and "cpu" in msg and "meta" in msg and "tensors" not in msg


def test_stride_rejection_points_to_to_device(case):
    with pytest.raises(ValueError, match=r"cache: .*workbench\.format\.codec\.to_device"):
        wb.sparse_mla_decode(**_with(case, cache=case.main.cache.clone()), impl="reference")


def test_cache_off_a_16_byte_boundary_is_refused_by_name(case):
    """The Gluon rungs read the rope as 8-byte words: a cache view starting 8 bytes into its storage would
    fault on the GPU, so it is refused up front (found by review: data_ptr was never checked)."""
    c = case.main.cache
    nb, s0 = c.shape[0], c.stride(0)
    flat = torch.zeros(nb * s0 + 16, dtype=torch.uint8)
    flat[8:8 + nb * s0] = c.view(torch.uint8).as_strided((nb * s0,), (1,), c.storage_offset())
    shifted = flat.as_strided(c.shape, c.stride(), 8)
    assert torch.equal(shifted, c.view(torch.uint8)) and shifted.data_ptr() % 16 == 8
    with pytest.raises(ValueError, match=r"^cache: .*16-byte boundary.*storage_offset=8"):
        wb.sparse_mla_decode(**_with(case, cache=shifted), impl="reference")
    aligned = flat.as_strided(c.shape, c.stride(), 16)  # same storage, on a boundary: accepted by the checks
    wb.sparse_mla_decode(**_with(case, cache=aligned), impl="reference")
