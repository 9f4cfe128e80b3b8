#!/bin/bash
# locusctl simulate on the repository's sample (tests/data/calib_sample.jsonl)
# with a table fitted from it: the table and --json name every policy, the
# same seed prints the same report and another seed another, every bad input
# is refused with its reason (exit 2 for the command line, 1 for the files),
# and control/sim_plot.py turns the JSON into the SVG files it names.
set -euo pipefail
cd "$(dirname "$0")/.."
SIM="simulate"
. tests/simulate_lib.sh

"$B/locusctl" fit --trace "$trace" --decoders 4 --tune off -o "$tmp/t4.tbl" -q >/dev/null
run=(--trace "$trace" --decoders 4 --table "$tmp/t4.tbl" --tau 0.05,0.1,1 --rate 800
     --requests 2000 --order shuffle --batch-cap 16)

"$B/locusctl" simulate "${run[@]}" --seed 3 >"$tmp/table"
cat "$tmp/table"
for p in random rr jsq p2c domain "eldr tau=0.05" "eldr tau=0.1" "eldr tau=1"; do
	grep -q "^$p " "$tmp/table" || fail "table has no row '$p'"
done

"$B/locusctl" simulate "${run[@]}" --seed 3 --json >"$tmp/a.json"
"$B/locusctl" simulate "${run[@]}" --seed 3 --json >"$tmp/b.json"
"$B/locusctl" simulate "${run[@]}" --seed 4 --json >"$tmp/c.json"
cmp -s "$tmp/a.json" "$tmp/b.json" || fail "same seed, different JSON"
cmp -s "$tmp/a.json" "$tmp/c.json" && fail "another seed, the same JSON"
/usr/bin/python3 - "$tmp/a.json" <<'EOF' || fail "JSON"
import json, sys
run = json.load(open(sys.argv[1]))
labels = [p["label"] for p in run["policies"]]
assert labels == ["random", "rr", "jsq", "p2c", "domain", "eldr tau=0.05", "eldr tau=0.1",
                  "eldr tau=1"], labels
for p in run["policies"]:
    q, t = p["tpot_quantiles_ms"], p["tpot_ms"]
    assert len(q) == 101 and q == sorted(q), p["label"]
    assert q[50] == t["p50"] and q[99] == t["p99"], p["label"]
    assert t["p50"] <= t["p90"] <= t["p99"], p["label"]
assert run["requests"] == 2000 and run["decoders"] == 4 and run["model"] == "deepseek-v2-lite"
# the step model: DeepSeek-V2-Lite's expert, 2048 x 1408 x 3 x 2 bytes; H100 SXM 3.35 TB/s
assert run["step_model"]["expert_bytes"] == 17301504
assert run["step_model"]["hbm_bytes_per_s"] == 3.35e12
print("json: %d policies" % len(labels))
EOF

# overrides reach the step model: 1 GB/s and a fixed 1 ms step (an unknown option is refused)
"$B/locusctl" simulate --trace "$trace" --decoders 2 --policies rr --hbm-gbps 1 --fixed-us 1000 \
	--expert-bytes-check 2>/dev/null && fail "an unknown option was accepted"
"$B/locusctl" simulate --trace "$trace" --decoders 2 --policies rr --hbm-gbps 1 --fixed-us 1000 \
	--kv-bytes-per-token 0 --json >"$tmp/o.json"
/usr/bin/python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))["step_model"]
assert m["hbm_bytes_per_s"] == 1e9 and m["fixed_ms"] == 1 and m["kv_bytes_per_token"] == 0, m
' "$tmp/o.json" || fail "overrides"

# refusals
expect 2 'trace FILE is required' --decoders 4
expect 2 'decoders K is required' --trace "$trace"
expect 2 "decoders '0'" --trace "$trace" --decoders 0
expect 2 "rate '-1'" --trace "$trace" --decoders 4 --rate -1
expect 2 "rate 'nan'" --trace "$trace" --decoders 4 --rate nan
expect 2 "tau '3'" --trace "$trace" --decoders 4 --table "$tmp/t4.tbl" --tau 3
expect 2 "tau '0.1,,0.2'" --trace "$trace" --decoders 4 --table "$tmp/t4.tbl" --tau 0.1,,0.2
expect 2 'tau needs --table' --trace "$trace" --decoders 4 --tau 0.1
expect 2 "policies 'fifo'" --trace "$trace" --decoders 4 --policies fifo
expect 2 'eldr needs --table' --trace "$trace" --decoders 4 --policies eldr
expect 2 "model 'qwen3'" --trace "$trace" --decoders 4 --model qwen3
expect 2 "gpu 'a100'" --trace "$trace" --decoders 4 --gpu a100
expect 2 "batch-cap '0'" --trace "$trace" --decoders 4 --batch-cap 0
expect 2 "hbm-gbps '0'" --trace "$trace" --decoders 4 --hbm-gbps 0
expect 2 "unexpected argument" --trace "$trace" --decoders 4 extra
expect 1 'trace is 26 MoE layers x 64 experts, top-6; model qwen3-30b-a3b is 48 x 128, top-8' \
	--trace "$trace" --decoders 4 --model qwen3-30b-a3b
expect 1 'routes to 4 decoders, the simulation has 8' --trace "$trace" --decoders 8 \
	--table "$tmp/t4.tbl"
expect 1 'no such file|No such file' --trace "$tmp/absent.jsonl" --decoders 4
head -c 1000 "$tmp/t4.tbl" >"$tmp/short.tbl"
expect 1 'short.tbl' --trace "$trace" --decoders 4 --table "$tmp/short.tbl"
sed 's/"domain":"[a-z]*",//' "$trace" >"$tmp/nodomain.jsonl"
expect 1 'domain needs a trace with domain labels' --trace "$tmp/nodomain.jsonl" --decoders 4 \
	--policies domain
sed 's/,"routed_experts":.*}$/}/' "$trace" >"$tmp/nogen.jsonl"
expect 1 "request 'law-0@0' has no generated tokens" --trace "$tmp/nogen.jsonl" --decoders 4
expect 1 "request 'law-0@0' has no routed_experts" --trace "$tmp/nogen.jsonl" --decoders 4 \
	--gen-len 8
# with the shape check waived, Qwen3's costs price this trace's routings
"$B/locusctl" simulate --trace "$trace" --decoders 4 --model qwen3-30b-a3b --gpu mi300x \
	--allow-shape-mismatch --policies jsq >/dev/null || fail "--allow-shape-mismatch"

# tau chosen on a fit trace: the rule recomputed from the fit rows the JSON lists, and the
# held-out row at that tau present (the sample's odd requests as the fit trace)
/usr/bin/python3 -c '
import sys
lines = open(sys.argv[1]).read().splitlines()
open(sys.argv[2], "w").write("\n".join([lines[0]] + lines[2::2]) + "\n")
' "$trace" "$tmp/fit.jsonl"
"$B/locusctl" simulate "${run[@]}" --seed 3 --fit-trace "$tmp/fit.jsonl" --json >"$tmp/tau.json" \
	2>/dev/null
/usr/bin/python3 - "$tmp/tau.json" <<'EOF' || fail "tau chosen on the fit trace"
import json, sys
run = json.load(open(sys.argv[1]))
c = run["tau_choice"]
fit = c["fit"]
assert [r["label"] for r in fit] == ["random", "rr", "jsq", "p2c", "eldr tau=0.05",
                                     "eldr tau=0.1", "eldr tau=1"], fit
lb99 = min(r["p99"] for r in fit if not r["label"].startswith("eldr"))
eldr = [r for r in fit if r["label"].startswith("eldr")]
kept = [r for r in eldr if r["p99"] <= lb99]
want = min(kept, key=lambda r: r["p50"]) if kept else min(eldr, key=lambda r: r["p99"])
assert c["tail_kept"] == bool(kept) and abs(c["fit_best_balancer_p99_ms"] - lb99) < 1e-12, c
assert want["label"] == "eldr tau=%g" % c["tau"], (want, c["tau"])
assert any(p["policy"] == "eldr" and p["tau"] == c["tau"] for p in run["policies"])
print("tau chosen on the fit trace: %g (tail kept: %s)" % (c["tau"], c["tail_kept"]))
EOF
"$B/locusctl" simulate "${run[@]}" --seed 3 --fit-trace "$tmp/fit.jsonl" 2>/dev/null |
	grep -q '^  held-out at tau ' || fail "the table does not report the held-out result at the chosen tau"
expect 2 'fit-trace picks one of several --tau' --trace "$trace" --decoders 4 \
	--table "$tmp/t4.tbl" --tau 0.1 --fit-trace "$tmp/fit.jsonl"
expect 1 'absent.jsonl' "${run[@]}" --fit-trace "$tmp/absent.jsonl"

# the plots
/usr/bin/python3 control/sim_plot.py "$tmp/a.json" -o "$tmp/plots" >"$tmp/plot.out" || fail "sim_plot"
cat "$tmp/plot.out"
for f in tpot_cdf.svg tpot_vs_tau.svg; do
	grep -q "wrote $tmp/plots/$f" "$tmp/plot.out" && grep -q '<svg' "$tmp/plots/$f" ||
		fail "no $f"
done
echo '{"policies": []}' >"$tmp/bad.json"
/usr/bin/python3 control/sim_plot.py "$tmp/bad.json" -o "$tmp/plots" 2>"$tmp/err" &&
	fail "sim_plot took a run with no policies"
grep -q 'not a locusctl simulate --json run' "$tmp/err" || fail "sim_plot's refusal: $(cat "$tmp/err")"

finish test_simulate
