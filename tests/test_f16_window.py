"""The f16 rungs' scale window (GPU only: Gluon, sm_90). ``F16=1`` applies the UE8M0 scale with one f16
multiply, exact for scale bytes in [F16_MIN_SCALE_BYTE, F16_MAX_SCALE_BYTE] = [112, 134]: at both edges the
output matches the fp32 reference; one selected token outside the window makes its query's output NaN
(every head), and leaves the other queries exact."""
import pytest
import torch

from workbench import registry
from workbench.codec import quantize_kv, raw_scale_bytes
from workbench.decode import sparse_mla_decode
from workbench.kernels.wgmma import F16_MAX_SCALE_BYTE, F16_MIN_SCALE_BYTE
from workbench.metrics import compare

pytestmark = pytest.mark.gpu
F16_RUNGS = tuple(n for n in registry.names("split") if registry.get(n).fixed_meta.get("F16"))
B, H, TOPK, PAGES, BS = 3, 16, 128, 6, 64


def _case(seed=0):
    """A cache whose first tile of pages 0-1 is scaled to the window's top (amax 448 * 2**7 -> byte 134) and
    queries that each select 128 shuffled tokens of their own two pages (query b: pages 2b, 2b+1)."""
    g = torch.Generator().manual_seed(seed)
    kv = torch.randn(PAGES, BS, 512, generator=g)
    kv[:2, :, :64] *= 448 * 2 ** 7 / kv[:2, :, :64].abs().amax(dim=-1, keepdim=True)
    cache = quantize_kv(kv.to(torch.bfloat16).cuda())
    sb = raw_scale_bytes(cache)
    assert int(sb[:2, :, 0].max()) == F16_MAX_SCALE_BYTE  # the quantiser put the top of the window there
    sb[2:4, :, 3] = F16_MIN_SCALE_BYTE  # the window's bottom (below the quantiser's floor, 114)
    idx = torch.stack([torch.randperm(2 * BS, generator=g) + 2 * b * BS for b in range(B)]).int()
    q = (torch.randn(B, 1, H, 512, generator=g) * 0.1).to(torch.bfloat16).cuda()
    return q, cache, idx[:, None, :].cuda()


@pytest.mark.parametrize("impl", F16_RUNGS)
def test_the_window_edges_are_exact(impl):
    q, cache, idx = _case()
    out, lse = sparse_mla_decode(q, cache, idx, impl=impl)
    m = compare(out, lse, *sparse_mla_decode(q, cache, idx, impl="reference"))
    assert m["passed"], m


@pytest.mark.parametrize("byte", [F16_MIN_SCALE_BYTE - 1, F16_MAX_SCALE_BYTE + 1], ids=["below", "above"])
@pytest.mark.parametrize("impl", F16_RUNGS)
def test_a_scale_outside_the_window_makes_its_query_nan(impl, byte):
    q, cache, idx = _case()
    page, off = divmod(int(idx[1, 0, 7]), BS)  # a token only query 1 selects
    raw_scale_bytes(cache)[page, off, 5] = byte
    out, lse = sparse_mla_decode(q, cache, idx, impl=impl)
    assert torch.isnan(out[1]).all(), "a scale outside the window must not give a number"
    ref = sparse_mla_decode(q, cache, idx, impl="reference")
    for b in (0, 2):
        m = compare(out[b:b + 1], lse[b:b + 1], ref[0][b:b + 1], ref[1][b:b + 1])
        assert m["passed"], (b, m)
