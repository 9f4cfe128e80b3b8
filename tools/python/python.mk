# tools/python: the Python package over liblocus.so (pure Python, ctypes) and
# its pytest suite, run with Debian's python3 (tools/deps.sh installs
# python3-numpy, python3-pytest and python3-torch) against real locusd
# processes the fixtures start. route_ref is the C reference the route tests
# compare decisions and signature bytes with.
$(eval $(call PROGRAM,tools/python/route_ref,tools/python/tests/route_ref.c,eldr_router formats trace common,))
EXTRA_TESTS += tools/python/run-pytest.sh
