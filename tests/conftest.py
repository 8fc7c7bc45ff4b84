"""Test set-up: the Triton interpreter (before workbench is imported), the markers, the golden cases.

TRITON_INTERPRET is "1" (the CPU interpreter, what CI runs) unless the user sets TRITON_INTERPRET=0; then
the kernels compile for the GPU and ``pytest -m gpu`` runs the GPU tests. Markers (pyproject.toml):
- ``gpu``: needs CUDA and TRITON_INTERPRET=0; skipped otherwise.
- ``interpreter``: runs Triton kernels on CPU tensors; skipped under TRITON_INTERPRET=0, where it cannot run.
"""
import os

if os.environ.get("TRITON_INTERPRET") != "0":
    os.environ["TRITON_INTERPRET"] = "1"  # must precede `import workbench`: kernels are decorated at import

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

import workbench  # noqa: E402,F401
from workbench import cases  # noqa: E402
from workbench.golden import golden_dir, golden_names, load_golden  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
INTERPRETING = os.environ["TRITON_INTERPRET"] == "1"


def pytest_configure(config):
    assert workbench.INTERPRET == INTERPRETING, \
        "TRITON_INTERPRET must be set before workbench is imported (tests/conftest.py sets it)"


def gpu_skip_reason() -> str | None:
    """Why ``gpu`` tests cannot run here, or None when they can."""
    if INTERPRETING:
        return "GPU test: run with TRITON_INTERPRET=0 pytest -m gpu on a CUDA machine (this run interprets)"
    if not torch.cuda.is_available():
        return f"GPU test: this torch ({torch.__version__}) sees no CUDA device"
    return None


def pytest_collection_modifyitems(config, items):
    gpu_reason = gpu_skip_reason()
    for item in items:
        if gpu_reason and item.get_closest_marker("gpu"):
            item.add_marker(pytest.mark.skip(reason=gpu_reason))
        if not INTERPRETING and item.get_closest_marker("interpreter"):
            item.add_marker(pytest.mark.skip(reason="runs Triton kernels on CPU tensors: needs TRITON_INTERPRET=1 "
                                                    "(the default)"))


@pytest.fixture(scope="session")
def golden_cases():
    d = golden_dir()
    names = golden_names()
    assert names, f"no golden cases found in {d}"
    return {n: load_golden(n) for n in names}


@pytest.fixture(scope="session")
def catalogue_case():
    """``catalogue_case(id)``: the catalogue entry's case on the CPU, built once a session. Do not modify it."""
    built = {}

    def get(case_id: str):
        if case_id not in built:
            built[case_id] = cases.get(case_id).build()
        return built[case_id]
    return get


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
