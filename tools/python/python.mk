# tools/python: the Python package over liblocus.so (pure Python, ctypes) and
# its pytest suite, run with Debian's python3 (tools/dev/deps.sh installs
# python3-numpy, python3-pytest and python3-torch) against real locusd
# processes the fixtures start. route_ref is the C reference the route tests
# compare decisions and signature bytes with.
$(eval $(call PROGRAM,tools/python/route_ref,tools/python/tests/route_ref.c,eldr_router trace))
HOST_TESTS += tools/python/run-pytest.sh

# make install: the package where Debian's python3 looks (PREFIX=/usr:
# /usr/lib/python3/dist-packages; else PREFIX/lib/python3.X/dist-packages).
# Evaluated in the recipe only: make never runs python3 to parse.
PYTHONDIR = $(if $(filter /usr,$(PREFIX)),/usr/lib/python3/dist-packages,$(PREFIX)/lib/python$(shell /usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')/dist-packages)
INSTALL_EXTRA += install-python

.PHONY: install-python
install-python:
	install -d $(DESTDIR)$(PYTHONDIR)/locus
	install -m 0644 tools/python/locus/*.py $(DESTDIR)$(PYTHONDIR)/locus/
BENCH_SCRIPTS += tools/python/bench.sh
