"""The "gather_fine" floor provider (issue 25): the "gather" probe's kernel on a grid of at most FINE_SPLIT_TOKENS
tokens a program. Its grid arithmetic is derived by hand here; through the provider itself, on the interpreter,
its sink words are those of an independent reference (test_gather_async.expected_sink: the xor of exactly the
selected tokens' words, read by the layout's addressing) on the capped grid, for both KV scopes of a call."""
import numpy as np
import pytest
import torch

from workbench import registry
from workbench.bench import providers, sweeps
from workbench.bench.providers import FINE_PROBES, FINE_SPLIT_TOKENS, FineProbeProvider, ProbeProvider, fine_grid
from workbench.format.cases import build_case
from workbench.report import figures

from test_gather_async import expected_sink


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
    # the rows do not record the grid: the name and its label carry it
    assert f"{FINE_SPLIT_TOKENS} tokens a program" in figures.PROVIDER_LABELS["gather_fine"]
    if not torch.cuda.is_available():
        with pytest.raises(providers.Skip):
            providers.make_provider("gather_fine")


def test_the_bench_times_gather_fine_through_its_own_provider(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the providers refuse to build without CUDA
    p = providers.make_provider("gather_fine")
    assert type(p) is FineProbeProvider and p.is_probe and p.spec is registry.get("gather")
    assert type(providers.make_provider("gather")) is ProbeProvider


@pytest.mark.interpreter
def test_the_provider_reads_exactly_the_selected_words_on_the_capped_grid(monkeypatch):
    """Both scopes of a call (shuffled pages of 61 tokens and an extra scope of 69, a third of the indices -1 or
    out of range, a query with none valid), through FineProbeProvider.prepare with the cap lowered to 8 tokens:
    each scope's sink is [queries, ceil(topk / 8)] and holds the reference's words; the decode's own plan (the
    plain ProbeProvider) has other shapes, so a provider that ignored its grid would fail here."""
    case = build_case(batch=2, heads=2, topk=40, block_size=61, extra_topk=24, extra_block_size=69,
                      invalid_frac=0.3, all_invalid_queries=1, seed=3)
    kw = case.kwargs()
    ix, xix = kw["indices"], kw["extra_indices"]
    assert (ix == -1).any() and (ix >= kw["cache"].shape[0] * 61).any()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the providers refuse to build without CUDA
    monkeypatch.setattr(providers, "FINE_SPLIT_TOKENS", 8)
    fine = FineProbeProvider("gather_fine").prepare(kw)()
    coarse = ProbeProvider("gather").prepare(kw)()
    assert [s.shape for s in fine] == [(2, 5), (2, 3)]
    assert [s.shape for s in coarse] != [s.shape for s in fine]
    for sink, cache, idx in zip(fine, (kw["cache"], kw["extra_cache"]), (ix, xix)):
        want = expected_sink(cache, idx, sink.shape[1], 8)
        assert want.any()
        np.testing.assert_array_equal(sink.cpu().numpy(), want)
