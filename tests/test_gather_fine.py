"""The "gather_fine" floor provider (issue 25): the "gather" probe's kernel on a grid of at most 64 tokens a
program. Its grid arithmetic is derived by hand here; its sink, on the interpreter, is the xor of exactly the
selected tokens' words, the same word the decode's plan gives (the probe reads each valid token once whatever the
grid)."""
import pytest
import torch

from workbench import registry
from workbench.bench import providers, sweeps
from workbench.bench.providers import FINE_PROBES, FINE_SPLIT_TOKENS, fine_grid, make_provider
from workbench.format.cases import build_case


@pytest.mark.parametrize("topk,decode_tps,expected", [
    pytest.param(2048, 512, (32, 64), id="b64h16-k2048-decode-512-a-program"),
    pytest.param(2048, 64, (32, 64), id="already-64"),
    pytest.param(512, 16, (32, 16), id="b1h64-k512-decode-16-kept"),
    pytest.param(100, 512, (2, 64), id="topk-not-a-multiple"),
    pytest.param(1, 16, (1, 16), id="one-index"),
])
def test_fine_grid_caps_the_tokens_a_program_and_covers_topk(topk, decode_tps, expected):
    n, tps = fine_grid(topk, decode_tps)
    assert (n, tps) == expected
    assert tps <= FINE_SPLIT_TOKENS and n * tps >= topk and (n - 1) * tps < topk  # every index, no empty program


def test_fine_probes_launch_a_registered_probe_and_are_bench_providers():
    assert FINE_PROBES == {"gather_fine": "gather"} and registry.get("gather").kind == "probe"
    assert "gather_fine" in providers.provider_names() and "gather_fine" in sweeps.FLOOR_PROBES
    assert "gather_fine" not in registry.names()  # a plan of a registered probe, not a kernel of its own
    if not torch.cuda.is_available():
        with pytest.raises(providers.Skip):
            make_provider("gather_fine")


@pytest.mark.interpreter
def test_fine_grid_reads_the_same_words_as_the_decode_plan():
    """The gather kernel's sink words, xor-folded per query, are the same on a coarse plan (2 programs of 24
    tokens) and on the fine grid of 8 tokens (5 programs): the same tokens read once each, with shuffled pages of
    61 tokens, a third of the indices -1 or out of range, and a query with none valid."""
    case = build_case(batch=2, heads=2, topk=40, block_size=61, invalid_frac=0.3, all_invalid_queries=1, seed=3)
    ix = case.main.indices
    assert (ix == -1).any() and (ix >= case.main.cache.shape[0] * 61).any()
    spec = registry.get("gather")

    def folded(num_splits, tps):
        sink = spec.launch(cache=case.main.cache, indices=ix, num_splits=num_splits, tokens_per_split=tps)
        assert sink.shape == (2, num_splits)
        out = torch.zeros(2, dtype=torch.int32)
        for j in range(num_splits):
            out ^= sink[:, j].cpu()
        return out

    coarse = folded(2, 24)
    n, tps = fine_grid(40, 24, most=8)
    assert (n, tps) == (5, 8)
    fine = folded(n, tps)
    assert coarse[0] != 0 and torch.equal(fine, coarse)
