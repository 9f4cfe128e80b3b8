# locus-loadgen's multi-instance and --allow-errors behaviour on one host node.
EXTRA_TESTS += tests/test_loadgen.sh
