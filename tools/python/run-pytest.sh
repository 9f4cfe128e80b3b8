#!/bin/sh
# test-timeout: 1500
# The Python package's tests (tools/python/tests) under Debian's python3 and
# pytest, against the build tree's liblocus.so and locusd ($BUILD, default
# build). pytest's own summary line closes the output. On a machine whose other core is
# busy the suite takes minutes (locusd's lcores share it): hence the longer bound above.
set -eu
cd "$(dirname "$0")/../.."
export BUILD="${BUILD:-build}"
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in the checkout
export LOCUS_LIBRARY="$PWD/$BUILD/lib/liblocus.so.0"
# the whole suite unless a test file or directory is named (run-pytest.sh -k NAME works too)
paths=tools/python/tests
for a in "$@"; do
	[ -e "${a%%::*}" ] && paths=
done
# Debian's interpreter, whatever python3 comes first in PATH (the packages are its)
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider $paths "$@"
