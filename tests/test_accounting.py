"""FLOP and byte accounting against hand-computed values."""
import torch

from workbench.accounting import count_valid_tokens, decode_cost


def test_decode_cost_by_hand():
    c = decode_cost(batch=2, s_q=1, heads=16, valid_tokens=100)
    assert c.flops == 2 * 2 * 16 * 100 * 512 == 3_276_800
    # 100 rows of 584 B, plus bf16 q and out: 2 * (2*1*16*512*2 B)
    assert c.bytes == 58_400 + 65_536 == 123_936
    assert abs(c.intensity - 3_276_800 / 123_936) < 1e-12


def test_intensity_b64_h64_topk2048_by_hand():
    c = decode_cost(batch=64, s_q=1, heads=64, valid_tokens=64 * 2048)
    assert c.flops == 4 * 64 * 131_072 * 512 == 17_179_869_184
    assert c.bytes == 131_072 * 584 + 2 * 64 * 64 * 512 * 2 == 84_934_656
    # DESIGN.md's ~3.5*h is the limit when cache rows dominate: 4*512/584 = 3.507
    long = decode_cost(batch=1, s_q=1, heads=64, valid_tokens=1 << 24)
    assert abs(long.intensity / 64 - 4 * 512 / 584) < 1e-3


def test_count_valid_tokens_by_hand():
    idx = torch.tensor([[[0, -1, 5, 99]], [[3, 4, -7, 1]]], dtype=torch.int32)
    assert count_valid_tokens(idx, num_tokens=10) == 2 + 3
    tl = torch.tensor([2, 4], dtype=torch.int32)
    assert count_valid_tokens(idx, num_tokens=10, topk_length=tl) == 1 + 3


def test_call_valid_tokens_counts_both_scopes_by_hand():
    from workbench.accounting import call_valid_tokens, case_cost
    from workbench.format.cases import build_case
    c = build_case(batch=2, heads=4, topk=8, extra_topk=4, invalid_frac=0.0)
    # every index valid: 2 queries x 8 main + 2 queries x 4 extra
    assert call_valid_tokens(c.kwargs()) == 2 * 8 + 2 * 4
    assert case_cost(c).valid_tokens == 24
    c = build_case(batch=2, heads=4, topk=8, extra_topk=4, invalid_frac=0.0, topk_length=True)
    # builder sets topk_length = [8, 0]: batch 1 keeps only its extra scope
    assert call_valid_tokens(c.kwargs()) == 8 + 2 * 4
