#!/bin/bash
# The signature cache on the repository's real sample (tools/eval/sigcache_evidence
# --sample): requests whose per-domain head is named as cached blocks get
# byte for byte the full prompt's signature and the same decision, every
# one (the tool exits 1 otherwise); the figures are printed, not asserted.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$("${BUILD:-build}/tools/eval/sigcache_evidence" --sample)
echo "$out"
grep -Eq 'signatures equal to the full prompt.s ([0-9]+)/\1, decisions ([0-9]+)/\2$' <<<"$out"
