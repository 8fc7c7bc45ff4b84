#!/usr/bin/env bash
# The test suite: CPU only, Triton interpreter, tiny shapes.
source "$(dirname "$0")/env.sh"
# Two worker processes, each taking whole test files, so a module's fixtures (test_notebooks' run of every notebook)
# are built once and a file's tests keep their order; TEST_WORKERS=0 runs everything in this process
exec python -m pytest -q -ra -n "${TEST_WORKERS:-2}" --dist loadfile "$@"
