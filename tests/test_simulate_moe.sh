#!/bin/bash
# locusctl simulate --moe on the repository's sample (tests/data/calib_sample.jsonl):
# the table and --json hold every set, topology and placement; the same seed
# prints the same report and another seed another; on one GPU every
# placement takes the same time (nothing leaves the GPU: the layer is the
# latency and compute); --fit-trace with the sample's even/odd requests in two
# files equals the built-in split; presets and overrides reach the layer
# model; bad input is refused with its reason (exit 2 for the command line, 1
# for the files); control/sim_plot.py draws moe_layer_time.svg.
set -euo pipefail
cd "$(dirname "$0")/.."
SIM="simulate --moe"
. tests/simulate_lib.sh

"$B/locusctl" simulate --moe --trace "$trace" >"$tmp/table"
cat "$tmp/table"
for set in calibration held-out; do
	for topo in 1x8 2x4 4x8; do
		for p in uniform EPLB GRACE; do
			grep -Eq "^$set +$topo +$p " "$tmp/table" || fail "table has no row $set $topo $p"
		done
		grep -Eq "^$set +$topo +[-+][0-9.]+% \[" "$tmp/table" || fail "no differences $set $topo"
	done
done

"$B/locusctl" simulate --moe --trace "$trace" --json >"$tmp/a.json"
"$B/locusctl" simulate --moe --trace "$trace" --json --seed 1 >"$tmp/b.json"
"$B/locusctl" simulate --moe --trace "$trace" --json --seed 2 >"$tmp/c.json"
cmp -s "$tmp/a.json" "$tmp/b.json" || fail "same seed, different JSON"
cmp -s "$tmp/a.json" "$tmp/c.json" && fail "another seed, the same JSON"

/usr/bin/python3 - "$tmp/a.json" <<'EOF' || fail "JSON"
import json, sys
run = json.load(open(sys.argv[1]))
assert run["mode"] == "moe" and run["model"] == "deepseek-v2-lite" and run["fabric"] == "nvlink4-rdma400"
m = run["layer_model"]
# DeepSeek-V2-Lite: a row 2048 x 2 bytes; an expert 2048 x 1408 x 3 x 2 bytes, 6 x 2048 x 1408 FLOPs
assert m["row_bytes"] == 4096 and m["expert_bytes"] == 17301504, m
assert m["flops_per_pair"] == 6 * 2048 * 1408, m
# H100 SXM: 989.5 dense BF16 TFLOP/s, 3.35 TB/s; NVLink 4 450 GB/s, 400 Gb/s RDMA per GPU
assert m["gpu_flops"] == 989.5e12 and m["hbm_bytes_per_s"] == 3.35e12, m
assert m["intra_bytes_per_s"] == 450e9 and m["inter_bytes_per_s"] == 50e9, m
assert run["sets"]["calibration"]["requests"] == 48 and run["sets"]["held_out"]["requests"] == 48
assert [t["topo"] for t in run["topologies"]] == ["1x8", "2x4", "4x8"]
for t in run["topologies"]:
    for key in ("calibration", "held_out"):
        c = t[key]
        assert [p["name"] for p in c["placements"]] == ["uniform", "EPLB", "GRACE"]
        for p in c["placements"]:
            lo, hi = p["layer_us_ci"]
            assert lo <= p["layer_us"] <= hi, (t["topo"], key, p)
            # layer = 2 x all-to-all + compute, each a mean over the same steps
            assert abs(p["layer_us"] - 2 * p["a2a_us"] - p["compute_us"]) < 1e-9 * p["layer_us"], p
            assert p["compute_us"] > 0 and p["a2a_us"] > 0, p
            if t["nodes"] == 1:
                assert p["rows_off_node"] == 0, p
            assert p["rows_off_node"] <= p["rows_off_gpu"] <= 6, p
        lt = {p["name"]: p["layer_us"] for p in c["placements"]}
        for d in c["differences"]:
            assert abs(d["rel"] - (lt[d["a"]] / lt[d["b"]] - 1)) < 1e-12, d
            assert d["ci"][0] <= d["rel"] <= d["ci"][1], d
print("json: %d topologies" % len(run["topologies"]))
EOF

# one GPU: no row leaves it, so every placement reads the same experts the same way
"$B/locusctl" simulate --moe --trace "$trace" --topo 1x1 --latency-us 3 --json >"$tmp/one.json"
/usr/bin/python3 - "$tmp/one.json" <<'EOF' || fail "one GPU"
import json, sys
t = json.load(open(sys.argv[1]))["topologies"][0]
for key in ("calibration", "held_out"):
    ps = t[key]["placements"]
    for p in ps:
        assert p["rows_off_gpu"] == 0 and abs(p["a2a_us"] - 3) < 1e-9, p
    assert len({p["layer_us"] for p in ps}) == 1, ps
EOF

# --fit-trace: the sample's even and odd requests in two files give the built-in split's figures
/usr/bin/python3 - "$trace" "$tmp/even.jsonl" "$tmp/odd.jsonl" <<'EOF'
import sys
lines = open(sys.argv[1]).read().splitlines()
for path, par in ((sys.argv[2], 0), (sys.argv[3], 1)):
    open(path, "w").write("\n".join([lines[0]] + lines[1 + par::2]) + "\n")
EOF
"$B/locusctl" simulate --moe --fit-trace "$tmp/even.jsonl" --trace "$tmp/odd.jsonl" --json >"$tmp/f.json"
/usr/bin/python3 -c '
import json, sys
a, f = (json.load(open(p)) for p in sys.argv[1:3])
assert a["topologies"] == f["topologies"] and a["sets"] == f["sets"]
assert f["fit_trace"].endswith("even.jsonl")
' "$tmp/a.json" "$tmp/f.json" || fail "--fit-trace differs from the built-in split"

# overrides and presets reach the layer model
"$B/locusctl" simulate --moe --trace "$trace" --topo 2x4 --gpu mi300x --intra-gbps 20 \
	--inter-gbps 3.125 --tflops 100 --latency-us 2 --hidden 1024 --json >"$tmp/o.json"
/usr/bin/python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
m = r["layer_model"]
assert r["fabric"] == "xgmi-rdma400" and m["hbm_bytes_per_s"] == 5.3e12, r
assert m["intra_bytes_per_s"] == 20e9 and m["inter_bytes_per_s"] == 3.125e9, m
assert m["gpu_flops"] == 100e12 and m["latency_us"] == 2 and m["row_bytes"] == 2048, m
' "$tmp/o.json" || fail "overrides"
"$B/locusctl" simulate --moe --trace "$trace" --topo 2x4 --fabric pcie4-rdma400 --json >"$tmp/p.json"
/usr/bin/python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))["layer_model"]
assert m["intra_bytes_per_s"] == 31.5e9 and m["inter_bytes_per_s"] == 50e9, m
' "$tmp/p.json" || fail "--fabric pcie4-rdma400"

# long requests: a held-out request of 720 tokens leaves round-robin groups short of a step
# (64 tokens); the command takes fewer groups instead of failing
/usr/bin/python3 - "$trace" "$tmp/long.jsonl" <<'EOF'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
odd = [json.loads(l) for l in lines[2::2]]
big = dict(odd[0], id="long")
big["prompt_routed_experts"] = sum((r["prompt_routed_experts"] for r in odd[:30]), [])
big["routed_experts"] = sum((r["routed_experts"] for r in odd[:30]), [])
open(sys.argv[2], "w").write("\n".join([lines[0]] + [json.dumps(r) for r in [big] + odd[30:]]) + "\n")
EOF
"$B/locusctl" simulate --moe --fit-trace "$tmp/even.jsonl" --trace "$tmp/long.jsonl" \
	--tokens-per-step 64 --topo 1x8 --json >"$tmp/long.json" || fail "a long request: simulate --moe failed"
/usr/bin/python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))["sets"]
assert s["held_out"]["requests"] == 19 and s["held_out"]["tokens"] == 1152, s
assert 2 <= s["held_out"]["groups"] < 9 and s["calibration"]["groups"] == 9, s
' "$tmp/long.json" || fail "a long request: the groups"

# refusals
expect 2 'trace FILE is required' --topo 1x8
expect 2 "topo '0x8'" --trace "$trace" --topo 0x8
expect 2 "topo '1x8x'" --trace "$trace" --topo 1x8x
expect 2 "topo '1x8,,2x4'" --trace "$trace" --topo 1x8,,2x4
expect 2 "fabric 'nope': want one of nvlink4-rdma400" --trace "$trace" --fabric nope
expect 2 "gpu 'a100'" --trace "$trace" --gpu a100
expect 2 "groups '1'" --trace "$trace" --groups 1
expect 2 "tokens-per-step '0'" --trace "$trace" --tokens-per-step 0
expect 2 "inter-gbps '0'" --trace "$trace" --inter-gbps 0
expect 2 "unknown or incomplete option '--decoders'" --trace "$trace" --decoders 4
expect 1 '3 GPUs do not divide the 64 experts' --trace "$trace" --topo 3x1
expect 1 'fewer than one step of 5000' --trace "$trace" --tokens-per-step 5000
expect 1 'model qwen3-30b-a3b is 48 x 128, top-8' --trace "$trace" --model qwen3-30b-a3b
expect 1 'no such file|No such file' --trace "$tmp/absent.jsonl"
head -c 3000 "$trace" >"$tmp/cut.jsonl"
expect 1 'cut.jsonl' --trace "$trace" --fit-trace "$tmp/cut.jsonl"

# the plot
/usr/bin/python3 control/sim_plot.py "$tmp/a.json" -o "$tmp/plots" >"$tmp/plot.out" || fail "sim_plot"
cat "$tmp/plot.out"
grep -q "wrote $tmp/plots/moe_layer_time.svg" "$tmp/plot.out" &&
	grep -q '<svg' "$tmp/plots/moe_layer_time.svg" || fail "no moe_layer_time.svg"

finish test_simulate_moe
