"""scripts/floor_patterns.py: its four index patterns, derived by hand on a small call, and its one-line refusal
without a GPU."""
import importlib.util
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "floor_patterns.py"
spec = importlib.util.spec_from_file_location("floor_patterns", SCRIPT)
fp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fp)

POOL, BS = 1 << 12, 64


@pytest.fixture
def ix():
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, POOL, (3, 2, 16), generator=g, dtype=torch.int32)


def pattern(ix, name):
    return fp.pattern_indices(ix, name, pool_tokens=POOL, block_size=BS, gen=torch.Generator().manual_seed(2))


def test_random_is_the_bench_indices_and_sorted_the_same_set_in_address_order(ix):
    assert pattern(ix, "random") is ix
    s = pattern(ix, "sorted")
    assert s.shape == ix.shape and s.is_contiguous()
    assert torch.equal(s, torch.sort(ix, dim=-1).values)
    assert (s[..., 1:] >= s[..., :-1]).all()


def test_contiguous_is_a_page_aligned_run_inside_the_pool(ix):
    c = pattern(ix, "contiguous")
    start = c[..., :1]
    assert torch.equal(c, start + torch.arange(16, dtype=torch.int32))
    assert (start % BS == 0).all() and (start >= 0).all() and (c < POOL).all()
    assert len(set(start.flatten().tolist())) > 1  # queries read different runs


def test_l2_is_one_query_set_shared_by_every_query(ix):
    l2 = pattern(ix, "l2")
    assert l2.shape == ix.shape and l2.is_contiguous()
    assert all(torch.equal(l2[b, s], ix[0, 0]) for b in range(3) for s in range(2))


def test_an_unknown_pattern_is_refused(ix):
    with pytest.raises(ValueError, match="pattern"):
        pattern(ix, "strided")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is the CPU path")
def test_without_a_gpu_it_exits_2_in_one_line(capsys, tmp_path):
    assert fp.main(["--csv", str(tmp_path / "x.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["floor_patterns: needs a CUDA GPU"] and not (tmp_path / "x.csv").exists()
