#!/bin/bash
# ELDR's acceptance on the full ESFT data (eldr_quality --check):
# held-out, the "ELDR" row (locusctl fit's default, every choice made on the
# calibration half) reads no more expert pairs per decode step than the
# domain oracle and its busiest decoder is no busier, at every K, B the tool
# prints. The figures are deterministic (fixed seeds), so this does not
# flake; it fails when a change to the fit, the tuning or the router makes
# ELDR fall behind the oracle on this sample. Skipped without the data
# ($LOCUS_DATA_DIR, default ../shared/data), as test_eldr_esft is.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${LOCUS_DATA_DIR:-../shared/data}
if [ ! -f "$data/esft/results/expert_scores/law/expert_weights_1.txt" ]; then
	echo "test_eldr_goal: skipped (no ESFT data under $data)"
	exit 0
fi
rc=0
out=$("${BUILD:-build}/tools/eval/eldr_quality" --check --clairvoyant 0) || rc=$?
echo "$out"
[ "$rc" -eq 0 ]
grep -q '^ESFT (full data)' <<<"$out"
grep -q '^check: ELDR reads no more than the oracle and is no busier at every K, B$' <<<"$out"
