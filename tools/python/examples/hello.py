#!/usr/bin/python3
"""Route one real prompt through a running locusd, as a PD proxy would.

Attaches four decoders (each reports its load: a decoder that reports none is
not routed to) and a prefiller to instance INSTANCE (default "default"),
takes the first prompt's routed experts from the repository's calibration
sample ([tokens, MoE layers, k], as vLLM and SGLang return them with
--enable-return-routed-experts) and prints where locusd routed it. Needs an
ELDR table pushed (locusctl fit ... && locusctl push -i INSTANCE TABLE).

    PYTHONPATH=tools/python /usr/bin/python3 tools/python/examples/hello.py [INSTANCE]
"""
import json
import os
import sys

import locus

SAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "..", "..", "..", "tests", "data", "calib_sample.jsonl")


def first_prompt(path):
    with open(path) as f:
        next(f)                                   # the header line
        return json.loads(next(f))["prompt_routed_experts"]


def main():
    instance = sys.argv[1] if len(sys.argv) > 1 else "default"
    decoders = [locus.attach(instance, decoder=d) for d in range(4)]
    for d in decoders:
        d.report_load(0)
    with locus.attach(instance, prefill=True) as p:
        d = p.route(first_prompt(SAMPLE))
        print(f"decoder {d.decoder} (band of {d.band}, similarity {d.similarity:.3f})")
        sig = decoders[d.decoder].poll_signatures(timeout=1.0)
        print(f"decoder {d.decoder} received {len(sig)} signature(s) of "
              f"{sig[0].prompt_tokens} prompt tokens" if sig else "nothing received")
    for d in decoders:
        d.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
