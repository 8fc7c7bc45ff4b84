#!/usr/bin/env bash
# The main job: every notebook through papermill into runs/<date>/, on the CPU unless -p device cuda.
source "$(dirname "$0")/env.sh"
exec python -m workbench notebooks "$@"
