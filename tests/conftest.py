"""Test set-up: the Triton interpreter (before workbench is imported), the markers and tiers, the golden cases.

TRITON_INTERPRET is "1" (the CPU interpreter, what CI runs) unless the user sets TRITON_INTERPRET=0; then
the kernels compile for the GPU and ``pytest -m gpu`` runs the GPU tests. Markers (pyproject.toml):
- ``gpu``: needs CUDA and TRITON_INTERPRET=0. Without a CUDA device these tests are not collected (the GPU-only
  modules in ``GPU_ONLY_MODULES`` are not even imported); with one, under the interpreter, they are skipped.
- ``interpreter``: runs Triton kernels on CPU tensors; skipped under TRITON_INTERPRET=0, where it cannot run.
- ``slow``: given here, by ``SLOW_TESTS`` and ``SLOW_FIXTURES`` below. ``pytest -m "not slow"`` is the quick tier
  (under a minute on 2 cores); the whole suite is a few minutes.

The golden cases are the repository's compact copies (``golden/``, see workbench/format/golden.py), plus any outside
folder's. tests/test_cache.py's quantiser check needs a case's ``kv_bf16``, which only some compact cases keep:
it is skipped, saying so, on the others (tests/test_golden_compaction.py runs it on the originals when present).
"""
import fnmatch
import os

if os.environ.get("TRITON_INTERPRET") != "0":
    os.environ["TRITON_INTERPRET"] = "1"  # must precede `import workbench`: kernels are decorated at import

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

import workbench  # noqa: E402,F401
from workbench.format import cases  # noqa: E402
from workbench.format.golden import golden_names, load_golden  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
INTERPRETING = os.environ["TRITON_INTERPRET"] == "1"
HAS_CUDA = torch.cuda.is_available()

# Modules whose every test needs a GPU: not collected (not imported) without a CUDA device.
GPU_ONLY_MODULES = ("test_gpu_checks.py",)
collect_ignore = [] if HAS_CUDA else list(GPU_ONLY_MODULES)

# The slow tier: tests that took about 0.7 s or more each on 2 CPU cores (pytest --durations=0, 2026-12-02; the
# whole suite about 6 minutes in one process, these most of them; scripts/test.sh's two workers take about 4), by
# "file::test" or "file::test[param glob]" (fnmatch on the parameter id), and every test that uses a fixture in
# SLOW_FIXTURES. The quick tier keeps one of each kind: the kernels and the drop-in on the small golden cases, the
# cheaper hostile cases, the CLI's in-process checks.
SLOW_FIXTURES = {
    "tiny_run",  # test_notebooks: runs every notebook through papermill (~80 s)
    "portable_lab",  # test_portable_ws: compiles the portable rung for three targets in child processes (~17 s)
}
SLOW_TESTS = (
    # notebooks through papermill or the CLI, in subprocesses
    "test_notebooks.py::test_plain_papermill_refuses_out_dir_in_data_or_figures_before_computing",
    "test_notebooks.py::test_failing_notebook_exits_nonzero_and_keeps_the_executed_copy",
    "test_notebooks.py::test_fresh_without_cuda_fails_loudly",
    "test_notebooks.py::test_default_output_is_a_scratch_folder",
    "test_notebooks.py::test_unknown_parameter_is_refused",
    "test_notebooks.py::test_occupancy_notebook_reads_a_run_folder_of_one_sweep_with_the_lab_tables_of_data",
    "test_cli.py::test_out_refusal_process_exits_2_with_one_line_before_the_cuda_check",
    "test_cli.py::test_only_an_unknown_notebook_process_exits_nonzero_and_leaves_no_run_folder",
    "test_cli.py::test_notebooks_out_dir_inside_figures_process_exits_with_one_line",
    "test_cli.py::test_bench_process_without_cuda_exits_nonzero_with_one_line",
    "test_cli.py::test_notebooks_out_dir_with_files_is_refused_unless_force",
    "test_cli.py::test_pipeline_runs_quietly_and_reports_progress_once",
    # every published figure drawn twice (1-4 s each)
    "test_figures.py::test_figure_basics_and_same_bytes_twice",
    # cross-compiling configs for the GPU targets
    "test_resources.py::test_one_config_per_target_compiles_with_plausible_numbers",
    "test_resources.py::test_model_prune_agrees_with_compiler_on_sm120",
    "test_resources.py::test_adding_a_kernel_is_one_registration",
    "test_resources.py::test_an_unaligned_integer_narrows_the_loads",
    "test_resources_gluon.py::*",
    # kernels under the interpreter on the larger golden and hostile cases (the small ones stay quick)
    # (the split kernels keep the golden case with a sink and an all-invalid query, the drop-in also the extra
    # scope's; the hostile catalogue keeps its value-range cases on every kernel)
    "test_kernels.py::test_split_kernel_matches_flashmla_golden[v4_b3_*]",
    "test_kernels.py::test_split_kernel_matches_flashmla_golden[v4x_*]",
    "test_kernels.py::test_split_kernel_matches_flashmla_golden[v4_b2_h128_*]",
    "test_kernels.py::test_split_kernel_matches_flashmla_golden[v4_b2_h64_k64_bs64-*]",
    "test_kernels.py::test_simt_matches_flashmla_golden[v4_b3_*]",
    "test_kernels.py::test_simt_matches_flashmla_golden[v4_b2_h128_*]",
    "test_kernels.py::test_kernel_matches_reference_on_hostile_case[h8-k40-bs256-sink-extra-bs2-xtklen-*]",
    "test_kernels.py::test_kernel_matches_reference_on_hostile_case[h24-k48-bs69-sinkneginf-tklen-invalid50-*]",
    "test_kernels.py::test_kernel_matches_reference_on_hostile_case[b1-h20-sq2-k24-bs2-sinkinf-extra-bs61-*]",
    "test_kernels.py::test_kernel_matches_reference_on_hostile_case[h5-sq2-k100-bs61-sinkmixed-tklen-allinvalid-*]",
    "test_kernels.py::test_kernel_matches_reference_on_hostile_case[b1-h64-k40-bs64-sink-tklen-*]",
    "test_kernels.py::test_mma_is_deterministic_and_forced_config_matches",
    "test_engine.py::test_drop_in_matches_flashmla_golden[v4_b3_*]",
    "test_engine.py::test_drop_in_matches_flashmla_golden[v4_b2_h128_*]",
    "test_engine.py::test_drop_in_matches_flashmla_golden[v4_b2_h64_k64_bs64]",
    "test_engine.py::test_op_passes_opcheck",
    "test_pdl.py::test_the_pdl_combine_waits_before_it_touches_memory",
    "test_plain_plans.py::test_environment_turns_the_cache_off",
    "test_plain_plans.py::test_every_inputs_strides_are_in_the_key",
    "test_plan.py::test_plan_reuse_allocates_nothing_interpreted_replay",
    "test_plan.py::test_plan_path_equals_plain_path_bit_for_bit[simt]",
    "test_gather_fine.py::test_the_provider_reads_exactly_the_selected_words_on_the_capped_grid",
    "test_current_tables.py::test_the_committed_data_names_a_current_table_for_the_headline_and_the_ladder",
)


def _slow_patterns():
    for pat in SLOW_TESTS:
        file, _, rest = pat.partition("::")
        test, bracket, param = rest.partition("[")
        yield file, test, (param[:-1] if bracket else None)


SLOW_PATTERNS = tuple(_slow_patterns())


def is_slow(item) -> bool:
    if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    file = Path(str(item.fspath)).name
    test, _, param = item.name.partition("[")
    param = param[:-1]
    return any(file == f and t in ("*", test) and (p is None or fnmatch.fnmatchcase(param, p))
               for f, t, p in SLOW_PATTERNS)


def pytest_configure(config):
    assert workbench.INTERPRET == INTERPRETING, \
        "TRITON_INTERPRET must be set before workbench is imported (tests/conftest.py sets it)"


def pytest_report_header(config):
    if not HAS_CUDA:
        return (f"no CUDA device: gpu tests not collected ({', '.join(GPU_ONLY_MODULES)} not imported); "
                "quick tier: pytest -m 'not slow'")
    return None


def gpu_skip_reason() -> str | None:
    """Why ``gpu`` tests cannot run here, or None when they can."""
    if INTERPRETING:
        return "GPU test: run with TRITON_INTERPRET=0 pytest -m gpu on a CUDA machine (this run interprets)"
    if not HAS_CUDA:
        return f"GPU test: this torch ({torch.__version__}) sees no CUDA device"
    return None


def pytest_collection_modifyitems(config, items):
    gpu_reason = gpu_skip_reason()
    kept, dropped = [], []
    for item in items:
        if item.get_closest_marker("gpu") and not HAS_CUDA:
            dropped.append(item)  # not collected without a CUDA device
            continue
        kept.append(item)
        if is_slow(item):
            item.add_marker(pytest.mark.slow)
        if gpu_reason and item.get_closest_marker("gpu"):
            item.add_marker(pytest.mark.skip(reason=gpu_reason))
        if not INTERPRETING and item.get_closest_marker("interpreter"):
            item.add_marker(pytest.mark.skip(reason="runs Triton kernels on CPU tensors: needs TRITON_INTERPRET=1 "
                                                    "(the default)"))
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(scope="session")
def golden_cases():
    names = golden_names()
    assert names, "no golden cases found"
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
