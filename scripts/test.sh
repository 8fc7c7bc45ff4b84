#!/usr/bin/env bash
# The test suite: CPU only, Triton interpreter, tiny shapes.
source "$(dirname "$0")/env.sh"
exec python -m pytest -q -ra "$@"
