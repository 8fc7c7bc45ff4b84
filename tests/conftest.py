"""Test set-up: the Triton interpreter (before workbench is imported) and the golden cases."""
import os

os.environ["TRITON_INTERPRET"] = "1"  # must precede `import workbench`: kernels are decorated at import

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

import workbench  # noqa: E402,F401
from workbench.golden import golden_dir, golden_names, load_golden  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config):
    assert workbench.INTERPRET, "TRITON_INTERPRET must be set before workbench is imported"


@pytest.fixture(scope="session")
def golden_cases():
    d = golden_dir()
    names = golden_names()
    assert names, f"no golden cases found in {d}"
    return {n: load_golden(n) for n in names}


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
