"""Host-side pieces the kernels share (kernels/common.py): the launch capture and the plain-int helpers."""
import threading

import pytest
import triton

from workbench.kernels.common import capture_launches, cdiv, head_group, launch, next_pow2


class FakeKernel:
    """Stands in for a jit object: ``kernel[grid](**args)`` records the call instead of running anything."""

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        return lambda **args: self.calls.append((grid, args))


def test_a_capture_records_only_its_own_threads_launches():
    kernel = FakeKernel()
    inside = threading.Event()   # A's capture is open
    b_done = threading.Event()   # B has launched
    result = {}

    def thread_a():
        with capture_launches() as records:
            inside.set()
            assert b_done.wait(10), "thread B never launched"
            launch(kernel, (1,), dict(who="a"))
            result["records"] = list(records)

    def thread_b():
        assert inside.wait(10), "thread A never opened its capture"
        launch(kernel, (2,), dict(who="b"))
        b_done.set()

    threads = [threading.Thread(target=thread_a), threading.Thread(target=thread_b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not any(t.is_alive() for t in threads)
    assert result["records"] == [(kernel, (1,), dict(who="a"))]  # A's own launch, recorded, not run
    assert kernel.calls == [((2,), dict(who="b"))]               # B's launch ran, unseen by A's capture


def test_nested_captures_record_into_the_innermost():
    kernel = FakeKernel()
    with capture_launches() as outer:
        launch(kernel, (1,), {})
        with capture_launches() as inner:
            launch(kernel, (2,), {})
        launch(kernel, (3,), {})
    launch(kernel, (4,), {})
    assert [g for _, g, _ in outer] == [(1,), (3,)] and [g for _, g, _ in inner] == [(2,)]
    assert kernel.calls == [((4,), {})]


def test_host_int_helpers_equal_tritons():
    """cdiv and next_pow2 stand in for triton.cdiv / triton.next_power_of_2 in host code (a ConstexprFunction
    call each there, ~10 us on this CPU): same values, zero and negatives included."""
    for n in [*range(-3, 4098), *(2**k + d for k in range(12, 63, 5) for d in (-1, 0, 1))]:
        assert next_pow2(n) == triton.next_power_of_2(n), n
    for b in (1, 2, 3, 16, 64, 100):
        for a in range(-200, 1000):
            assert cdiv(a, b) == triton.cdiv(a, b), (a, b)


def test_a_target_override_applies_only_in_its_own_thread():
    """The resource lab budgets pruning for another GPU inside target_override; a decode pruning in another
    thread at the same time keeps its own target."""
    from workbench.kernels.tuning import current_target, target_override
    own = current_target().arch
    other = "sm_120" if own != "sm_120" else "sm_89"
    inside, seen = threading.Event(), {}

    def elsewhere():
        inside.wait(5)
        seen["arch"] = current_target().arch

    t = threading.Thread(target=elsewhere)
    t.start()
    with target_override(other):
        assert current_target().arch == other
        inside.set()
        t.join(5)
    assert seen["arch"] == own
    assert current_target().arch == own


@pytest.mark.parametrize("heads,group", [(0, 64), (1, 16), (16, 16), (17, 32), (32, 32), (33, 64), (64, 64),
                                         (128, 64)], ids=lambda v: str(v))
def test_the_head_group_covers_the_heads_between_16_and_64(heads, group):
    """The one head-group rule of mma, tile512 and the Gluon rungs: at least the MMA's 16 rows, at most 64; 0
    (a prune hook that saw no head count) means 64, the group that fits any call."""
    assert head_group(heads) == group


def test_the_gluon_shared_model_rejects_a_misspelled_switch():
    """A misspelled rung switch must not be modelled silently as the default (it once was: **_switches)."""
    from workbench.kernels import wgmma
    from workbench.kernels.configs import TiledConfig
    c = TiledConfig(BLOCK_H=16, BLOCK_T=64, num_warps=8)
    same = wgmma.estimate_shared_bytes(c, K_BUFFERS=1)
    assert wgmma.estimate_shared_bytes(c, F16=1, K_BUFFERS=1, LEAVE_OUT=2) == same  # they move no bytes
    with pytest.raises(TypeError, match="K_BUFFER"):
        wgmma.estimate_shared_bytes(c, K_BUFFER=1)
