# locus-loadgen's multi-instance and --allow-errors behaviour on one host node.
EXTRA_TESTS += tests/test_loadgen.sh
# the daemon benchmark runs here and prints its rows (not timed)
EXTRA_TESTS += tests/test_bench_daemon.sh
