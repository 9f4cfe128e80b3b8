#!/bin/bash
# The fuzzing smoke of `make test`: every target runs its checked-in seeds
# and regression inputs, then fuzzes for FUZZ_SMOKE_SECONDS (3) from them,
# with a throw-away corpus (and logs: a failure's lines are printed). A
# crash or a broken contract fails the test.
set -u
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
FUZZ_WORK=$work FUZZ_LOGS=$work/logs FUZZ_SECONDS=${FUZZ_SMOKE_SECONDS:-3} FUZZ_NICE=0 tests/fuzz/run.sh "$@"
