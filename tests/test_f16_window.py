"""The f16 rungs' windows (GPU only: Gluon, sm_90). ``F16=1`` applies the UE8M0 scale with one f16
multiply, exact for scale bytes in [F16_MIN_SCALE_BYTE, F16_MAX_SCALE_BYTE] = [112, 134]: at both edges the
output matches the fp32 reference; one selected token outside the window makes its query's output NaN
(every head), and leaves the other queries exact. ``test_the_window_tests_can_fail`` checks on the CPU, with the
fp32 reference standing in for a kernel, that a wrong bottom edge (0, or twice or half the scale) fails them.
q and the rope are converted from bf16 to f16: exact from 2**-17 up to 65280 (the largest bf16 below 65536);
65536 and up is f16 inf, and a score of -inf from it would drop its token from the softmax, so the kernel
turns it into NaN."""
import pytest
import torch

from workbench import registry
from workbench.codec import quantize_kv, raw_scale_bytes, to_device
from workbench.decode import sparse_mla_decode
from workbench.kernels.wgmma import F16_MAX_SCALE_BYTE, F16_MIN_SCALE_BYTE
from workbench.metrics import compare


F16_RUNGS = tuple(n for n in registry.names("split") if registry.get(n).fixed_meta.get("F16"))
B, H, TOPK, PAGES, BS = 3, 16, 128, 6, 64
Q_COL, ROPE_AT = 5, (4, 17, 448 + 9)  # (page, token, column): a token only query 2 selects
F16_EDGES = [65280, 65536]  # bf16 values: the largest below f16's inf, and the first at it
F16_EDGE_IDS = ["65280-exact", "65536-inf"]


def _case(seed=0, device="cuda", rope_value=None):
    """Queries that each select 128 shuffled tokens of their own two pages (query b: pages 2b, 2b+1). Query 0's
    pages have their first tile scaled to the window's top (amax 448 * 2**7: byte 134), which dominates its
    output. Query 1's pages have every nope tile at the window's bottom (byte 112: the f16 subnormal 2**-15,
    below the quantiser's floor of 114, so written by hand) and a rope shrunk to 1e-3, so those tiles dominate
    its output. Query 2's pages are plain but for column Q_COL, positive in every token (a q of -inf there
    makes every score -inf: without the kernel's NaN every token would vanish, the head's out 0 and lse +inf);
    ``rope_value`` goes in one of their rope columns, ROPE_AT."""
    g = torch.Generator().manual_seed(seed)
    kv = torch.randn(PAGES, BS, 512, generator=g)
    kv[:2, :, :64] *= 448 * 2 ** 7 / kv[:2, :, :64].abs().amax(dim=-1, keepdim=True)
    kv[2:4, :, 448:] *= 1e-3
    kv[4:6, :, Q_COL] = kv[4:6, :, Q_COL].abs() + 0.5
    if rope_value is not None:
        kv[ROPE_AT] = rope_value
    cache = quantize_kv(kv.to(torch.bfloat16)).to(device) if device == "cpu" else \
        to_device(quantize_kv(kv.to(torch.bfloat16)), device)
    sb = raw_scale_bytes(cache)
    assert int(sb[:2, :, 0].max()) == F16_MAX_SCALE_BYTE  # the quantiser put the top of the window there
    sb[2:4, :, :7] = F16_MIN_SCALE_BYTE
    idx = torch.stack([torch.randperm(2 * BS, generator=g) + 2 * b * BS for b in range(B)]).int()
    q = (torch.randn(B, 1, H, 512, generator=g) * 0.1).to(torch.bfloat16).to(device)
    return q, cache, idx[:, None, :].to(device)


def per_query(out, lse, ref_out, ref_lse):
    """compare() of each query alone: its tolerance scales with the norm it is given, and query 0's output is
    ~1e5 times the others'."""
    return [compare(out[b:b + 1], lse[b:b + 1], ref_out[b:b + 1], ref_lse[b:b + 1]) for b in range(out.shape[0])]


@pytest.mark.gpu
@pytest.mark.parametrize("impl", F16_RUNGS)
def test_the_window_edges_are_exact(impl):
    q, cache, idx = _case()
    out, lse = sparse_mla_decode(q, cache, idx, impl=impl)
    for b, m in enumerate(per_query(out, lse, *sparse_mla_decode(q, cache, idx, impl="reference"))):
        assert m["passed"], (b, m)


@pytest.mark.gpu
@pytest.mark.parametrize("byte", [F16_MIN_SCALE_BYTE - 1, F16_MAX_SCALE_BYTE + 1], ids=["below", "above"])
@pytest.mark.parametrize("impl", F16_RUNGS)
def test_a_scale_outside_the_window_makes_its_query_nan(impl, byte):
    q, cache, idx = _case()
    page, off = divmod(int(idx[1, 0, 7]), BS)  # a token only query 1 selects
    raw_scale_bytes(cache)[page, off, 5] = byte
    out, lse = sparse_mla_decode(q, cache, idx, impl=impl)
    assert torch.isnan(out[1]).all() and torch.isnan(lse[1]).all(), "a scale outside the window must not give a number"
    ms = per_query(out, lse, *sparse_mla_decode(q, cache, idx, impl="reference"))
    for b in (0, 2):
        assert ms[b]["passed"], (b, ms[b])


@pytest.mark.parametrize("wrong", [0, F16_MIN_SCALE_BYTE + 1, F16_MIN_SCALE_BYTE - 1], ids=["zero", "double", "half"])
def test_the_window_tests_can_fail(wrong):
    """Runs anywhere: the reference on a cache whose bottom-edge bytes were read as another value fails query 1's
    check (and only query 1's), so a kernel that mishandles the subnormal scale 2**-15 cannot pass."""
    q, cache, idx = _case(device="cpu")
    ref = sparse_mla_decode(q, cache, idx, impl="reference")
    raw_scale_bytes(cache)[2:4, :, :7] = wrong
    passed = [m["passed"] for m in per_query(*sparse_mla_decode(q, cache, idx, impl="reference"), *ref)]
    assert passed == [True, False, True], passed


@pytest.mark.gpu
@pytest.mark.parametrize("value", F16_EDGES, ids=F16_EDGE_IDS)
@pytest.mark.parametrize("impl", F16_RUNGS)
def test_q_at_the_edge_of_f16(impl, value):
    """-65536 in head 3's q, column Q_COL, where every key of query 2 is positive: as f16 inf every score of the
    head is -inf. The head must come out NaN (not a silent zero-weight head); -65280 must come out right."""
    q, cache, idx = _case()
    q[2, 0, 3, Q_COL] = -value
    out, lse = sparse_mla_decode(q, cache, idx, impl=impl)
    ref_out, ref_lse = sparse_mla_decode(q, cache, idx, impl="reference")
    others = [h for h in range(H) if h != 3] if value >= 65536 else list(range(H))
    if value >= 65536:
        assert torch.isnan(out[2, 0, 3]).all() and torch.isnan(lse[2, 3]).all(), "an f16 inf in q must give NaN"
    m = compare(out[2:3, :, others], lse[2:3, others], ref_out[2:3, :, others], ref_lse[2:3, others])
    assert m["passed"], m
    for b, m in enumerate(per_query(out[:2], lse[:2], ref_out[:2], ref_lse[:2])):
        assert m["passed"], (b, m)


@pytest.mark.gpu
@pytest.mark.parametrize("value", F16_EDGES, ids=F16_EDGE_IDS)
@pytest.mark.parametrize("impl", F16_RUNGS)
def test_rope_at_the_edge_of_f16(impl, value):
    """One rope value of query 2's tokens at 65536 is f16 inf: q * inf is -inf in about half the heads, which
    would drop the token there and leave its lse and all but the inf column of its output finite and wrong.
    Every head of query 2 must be NaN, out and lse; 65280 must come out right."""
    q, cache, idx = _case(rope_value=value)
    out, lse = sparse_mla_decode(q, cache, idx, impl=impl)
    ms = per_query(out, lse, *sparse_mla_decode(q, cache, idx, impl="reference"))
    if value >= 65536:
        assert torch.isnan(out[2]).all() and torch.isnan(lse[2]).all(), "an f16 inf in the rope must give NaN"
        ms = ms[:2]
    for b, m in enumerate(ms):
        assert m["passed"], (b, m)
