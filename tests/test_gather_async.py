"""The "gather_async" floor probe: its sink is the xor of exactly the selected tokens' words (the interpreter, on
hostile caches; the GPU, when there is one), it sits beside "gather" in every sweep that times "gather", and the lab
compiles it for sm_90 with the loads it was built for (cp.async / LDGSTS.128 rings, or LDG.E.128 tiles)."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from workbench import registry
from workbench.bench import sweeps
from workbench.format.cases import build_case
from workbench.decode import INTERPRETER_SMS, plan_splits
from workbench.kernels import gather_async
from workbench.kernels.common import cdiv
from workbench.kernels.gather import launch_gather
from workbench.kernels.gather_async import GatherAsyncConfig, estimate_shared_bytes, launch_gather_async
from workbench.format.layout import MODEL1

interpreter = pytest.mark.interpreter
ROOT = Path(__file__).resolve().parents[1]


def expected_sink(cache: torch.Tensor, indices: torch.Tensor, num_splits: int, tokens_per_split: int) -> np.ndarray:
    """[b*s_q, num_splits] int32: per (query, split), the xor of every int32 word of each valid selected token's
    576 data bytes and 8 scale bytes, read by the layout's addressing (page * stride(0) + o * 576, and
    page * stride(0) + block_size * 576 + o * 8); -1 and indices outside the cache select nothing."""
    nb, bs = cache.shape[0], cache.shape[1]
    u8 = cache.view(torch.uint8) if cache.dtype != torch.uint8 else cache
    pages = u8.as_strided((nb, cache.stride(0)), (cache.stride(0), 1), u8.storage_offset()).cpu().numpy()
    data, scale = MODEL1.data_bytes_per_token, MODEL1.scale_bytes_per_token
    b, s_q, topk = indices.shape
    idx = indices.cpu().numpy().reshape(b * s_q, topk)
    out = np.zeros((b * s_q, num_splits), dtype=np.int32)
    for q in range(b * s_q):
        for t in range(topk):
            i = int(idx[q, t])
            if not 0 <= i < nb * bs:
                continue
            p, o = divmod(i, bs)
            raw = np.concatenate([pages[p, o * data:(o + 1) * data],
                                  pages[p, bs * data + o * scale:bs * data + (o + 1) * scale]])
            out[q, t // tokens_per_split] ^= np.bitwise_xor.reduce(raw.view("<i4"))
    return out


def _plans(b, s_q, topk):
    """(num_splits, tokens_per_split): the decode's plan for this call, splits of 23 tokens (no tile divides them;
    the last one short) and one split of everything."""
    p = plan_splits(queries=b * s_q, heads=16, topk=topk, num_sms=INTERPRETER_SMS)
    return [(p.num_splits, p.tokens_per_split), (cdiv(topk, 23), 23), (1, topk)]


# the interpreter's default (a 3-stage ring of 32-token tiles), a deep ring of 16-token tiles, synchronous 128-token
# tiles: tiles smaller, larger and not dividing the splits
CONFIGS = [None, dict(BLOCK_T=16, num_warps=4, num_stages=6), dict(BLOCK_T=128, num_warps=8, num_stages=1)]


@interpreter
@pytest.mark.parametrize("block_size", [pytest.param(2, marks=pytest.mark.slow),
                                        pytest.param(61, marks=pytest.mark.slow), 69])  # ~2.6 s each
def test_sink_is_the_xor_of_exactly_the_selected_words(block_size):
    """Shuffled pages of 2, 61 and 69 tokens, a third of the indices -1 or out of range (both sides), a query with
    no valid index, and every unselected page filled with 0xFF: a word read from anywhere else, or a masked token
    read, changes the sink. (The old probe writes the same words; it is compared on the GPU test only: its
    tl.xor_sum takes ~10 s a launch in the interpreter.)"""
    b, s_q, topk = 3, 2, 50
    case = build_case(batch=b, s_q=s_q, heads=2, topk=topk, block_size=block_size, invalid_frac=0.3,
                      all_invalid_queries=1, nan_unselected=True, seed=block_size)
    cache, indices = case.main.cache, case.main.indices
    assert (indices == -1).any() and (indices >= cache.shape[0] * block_size).any() and (indices < -1).any()
    for num_splits, tps in _plans(b, s_q, topk):
        want = expected_sink(cache, indices, num_splits, tps)
        assert want.any()
        for config in CONFIGS:
            got = launch_gather_async(cache=cache, indices=indices, num_splits=num_splits, tokens_per_split=tps,
                                      config=config)
            assert got.shape == (b * s_q, num_splits) and got.dtype == torch.int32
            np.testing.assert_array_equal(got.numpy(), want, err_msg=f"splits {num_splits}x{tps}, {config}")


@interpreter
def test_writes_into_the_given_sink():
    case = build_case(batch=2, topk=40, block_size=64, seed=1)
    sink = torch.full((2, 3), 7, dtype=torch.int32)
    got = launch_gather_async(cache=case.main.cache, indices=case.main.indices, num_splits=3, tokens_per_split=16,
                              sink=sink)
    assert got is sink
    np.testing.assert_array_equal(sink.numpy(), expected_sink(case.main.cache, case.main.indices, 3, 16))


def test_a_cache_it_cannot_read_in_16_byte_words_is_refused():
    storage = torch.zeros(4 * 600, dtype=torch.uint8)
    cache = storage.as_strided((2, 1, 1, 584), (600, 584, 584, 1))  # pages 600 B apart: not 16-byte aligned
    idx = torch.zeros(1, 1, 4, dtype=torch.int32)
    with pytest.raises(ValueError, match="16-byte"):
        launch_gather_async(cache=cache, indices=idx, num_splits=1, tokens_per_split=4)


def test_registered_as_a_probe_beside_gather():
    spec = registry.get("gather_async")
    assert spec.kind == "probe" and spec.interpretable and spec.prediction and spec.lab_signature
    assert registry.names("probe")[:2] == ("gather", "gather_async")
    assert "gather_async" in registry.compiled_kernels()
    from workbench.bench.providers import ProbeProvider, make_provider
    if torch.cuda.is_available():
        assert isinstance(make_provider("gather_async"), ProbeProvider)


@pytest.mark.parametrize("name", [s for s in sweeps.SWEEPS if s != "all"])
def test_every_sweep_that_times_gather_times_gather_async_and_gather_fine_beside_it(name):
    for shape, provs, modes, config in sweeps.sweep_shapes(name):
        if "gather" in provs:
            assert {"gather_async", "gather_fine"} <= set(provs), (name, shape.label)


def test_configs_round_trip_and_name_their_loop_stages():
    space = gather_async.CONFIG_SPACE
    assert len({c.label for c in space}) == len(space)
    for c in space:
        assert GatherAsyncConfig.from_triton(c.to_triton()) == c
        assert c.meta() == dict(BLOCK_T=c.BLOCK_T, NUM_STAGES=c.num_stages)  # the loop's pipeline depth
        assert registry.get("gather_async").check_config(c.columns()) == c
        assert estimate_shared_bytes(c) <= gather_async.SMEM_BUDGET
    assert {c.num_stages for c in space} == {1, 3, 4, 6}
    with pytest.raises(ValueError, match="BLOCK_T"):
        registry.get("gather_async").check_config(dict(BLOCK_T=48))


# ----------------------------------------------------------------------------- the lab (sm_90, no GPU)

@pytest.mark.slow
def test_lab_compiles_every_config_for_sm90_with_the_intended_loads():
    """Every config fits an sm_90 SM with no spills; the model bounds the compiled shared bytes; a pipelined config
    (3+ stages) issues only cp.async (16-byte .cg copies of the data), a synchronous one 16-byte global loads."""
    from workbench.lab.resources import lab_frame
    df = lab_frame("sm_90", "gather_async")
    assert len(df) == len(gather_async.CONFIG_SPACE) and (df.status == "fits").all(), df[["config", "reason"]]
    assert (df.spill_stores == 0).all() and (df.blocks_per_sm >= 1).all() and (df.registers <= 255).all()
    model = [estimate_shared_bytes(GatherAsyncConfig.from_any(dict(BLOCK_T=r.BLOCK_T, num_warps=r.num_warps,
                                                                   num_stages=r.num_stages), gather_async.ALLOWED, "t"))
             for r in df.itertuples()]
    assert (df.shared_bytes <= model).all(), list(zip(df.config, df.shared_bytes, model))
    piped, sync = df[df.num_stages >= 3], df[df.num_stages == 1]
    assert (piped.ld_global == 0).all() and (piped.cp_async > 0).all()
    # a ring of num_stages - 1 tiles: the shared bytes grow with it (576 + 8 B a token and its indices)
    assert ((piped.shared_bytes >= (piped.num_stages - 1) * piped.BLOCK_T * 584)).all()
    assert (sync.cp_async == 0).all() and (sync.ld_global_16B >= 9).all()
    assert (sync.shared_bytes < 1024).all()


SASS_CODE = """
import collections, json, re
from workbench.lab import resources as r
lk = r.lab_kernel("gather_async")
out = {}
for c in (dict(BLOCK_T=32, num_warps=4, num_stages=4), dict(BLOCK_T=64, num_warps=8, num_stages=1)):
    k, _ = r._compile_lab_kernel(lk, "sm_90", r.typed_config(lk, c))
    _, sass = r._read_cubin(k.asm["cubin"])
    ops = collections.Counter(re.findall(r"\\b(LDGSTS[.A-Z0-9]*|LDG[.A-Z0-9]*)\\b", sass))
    out[c["num_stages"]] = dict(ops)
print(json.dumps(out))
"""


@pytest.mark.slow
def test_sass_holds_ldgsts_128_or_ldg_128():
    """The SASS behind the PTX counts: the ring's data copies are LDGSTS.E.BYPASS.128 (cp.async.cg: 16 bytes,
    L1 bypassed) and no LDG; the synchronous tiles' data loads are 16-byte LDGs (ld.global.cg.v4)."""
    from workbench.lab.resources import without_interpreter
    ops = json.loads(without_interpreter(SASS_CODE).splitlines()[-1])
    piped, sync = ops["4"], ops["1"]
    assert piped.get("LDGSTS.E.BYPASS.128", 0) >= 9 and not any(k.startswith("LDG.") for k in piped)
    assert sum(n for k, n in sync.items() if k.startswith("LDG.E.128")) >= 9
    assert not any(k.startswith("LDGSTS") for k in sync)


# ----------------------------------------------------------------------------- on a GPU

@pytest.mark.gpu
@pytest.mark.parametrize("block_size", [61, 256])
def test_sink_on_the_gpu_autotuned(block_size):
    """The autotuned probe (every config the tuner tries writes the sink; the chosen one last) on a benchmark-sized
    split plan: the same words as the torch reading and as the old probe."""
    b, topk = 8, 2048
    case = build_case(batch=b, topk=topk, block_size=block_size, invalid_frac=0.05, seed=3, device="cuda")
    cache, indices = case.main.cache, case.main.indices
    p = plan_splits(queries=b, heads=16, topk=topk, num_sms=torch.cuda.get_device_properties(0).multi_processor_count)
    want = expected_sink(cache, indices, p.num_splits, p.tokens_per_split)
    got = launch_gather_async(cache=cache, indices=indices, num_splits=p.num_splits,
                              tokens_per_split=p.tokens_per_split)
    np.testing.assert_array_equal(got.cpu().numpy(), want)
    for c in gather_async.CONFIG_SPACE:
        got = launch_gather_async(cache=cache, indices=indices, num_splits=p.num_splits,
                                  tokens_per_split=p.tokens_per_split, config=c)
        np.testing.assert_array_equal(got.cpu().numpy(), want, err_msg=c.label)
    old = launch_gather(cache=cache, indices=indices, num_splits=p.num_splits, tokens_per_split=p.tokens_per_split)
    np.testing.assert_array_equal(old.cpu().numpy(), want)
