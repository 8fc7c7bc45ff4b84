"""scripts/floor_patterns.py: its four index patterns, derived by hand on a small call, and its one-line refusal
without a GPU."""
import importlib.util
from collections import Counter
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
    for b in range(3):
        for q in range(2):  # each query's own indices, duplicates included, nothing moved between queries
            assert Counter(s[b, q].tolist()) == Counter(ix[b, q].tolist())
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


@pytest.mark.parametrize("item,message", [
    pytest.param("gather_slow", "provider 'gather_slow'", id="unknown-name"),
    pytest.param('gather_async@{"BLOCK_T": 32', "not JSON", id="bad-json"),
])
def test_a_wrong_provider_is_an_argument_error_before_anything_runs(item, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        fp.main(["--csv", str(tmp_path / "x.csv"), "--providers", item])
    assert e.value.code == 2 and message in capsys.readouterr().err and not (tmp_path / "x.csv").exists()


def test_a_forced_config_of_gather_fine_keeps_its_capped_grid(monkeypatch):
    """probe_provider on the decode's plan (split_tokens 0) with a forced config: gather runs the decode's grid,
    gather_fine the capped one (2048 tokens: 32 programs of 64 a query), each in the forced config; unforced,
    gather_fine runs its pinned config (32-token tiles from 32 tokens a program) and gather its autotuner (None)."""
    from types import SimpleNamespace

    from workbench import registry
    seen = {}

    def launch(**kw):
        seen.setdefault("grid", (kw["num_splits"], kw["tokens_per_split"]))
        seen.setdefault("config", kw["config"])
    spec = SimpleNamespace(launch=launch)
    monkeypatch.setattr(registry, "get", lambda name: seen.setdefault("kernel", name) and spec)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the providers refuse to build without CUDA
    cache = torch.zeros(4, 64, 1, 584, dtype=torch.uint8)  # the layout's shape; the stub launch reads nothing
    kw = dict(q=torch.zeros(1, 1, 16, 8), indices=torch.zeros(1, 1, 2048, dtype=torch.int32), cache=cache)
    fp.probe_provider("gather_fine", 0).prepare(kw, {"BLOCK_T": 16})()
    assert seen.pop("grid") == (32, 64) and seen.pop("kernel") == "gather" and seen.pop("config") == {"BLOCK_T": 16}
    fp.probe_provider("gather_fine", 0).prepare(kw, None)()
    assert seen.pop("config") == dict(BLOCK_T=32, num_warps=8, num_stages=1)
    seen.clear()
    fp.probe_provider("gather", 0).prepare(kw, None)()
    assert seen.pop("grid")[1] > 64 and seen.pop("config") is None  # the decode's plan: fewer, longer programs
    seen.clear()
    fp.probe_provider("gather_fine", 256).prepare(kw, None)()  # its own grid asked for: exactly that, of its kernel
    assert seen.pop("grid") == (8, 256) and seen.pop("kernel") == "gather"
