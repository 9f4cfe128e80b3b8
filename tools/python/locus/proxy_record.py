# SPDX-License-Identifier: MIT
"""What a PD proxy routed, recorded as a calibration trace that
`locusctl fit --trace` reads (control/locus_trace.h): a header line
{"locus_trace":1,"n_layers":L,"k":K,"n_experts":E}, then one object per
request with its id, prompt_routed_experts [tokens][layers][k] as the
proxy routed them (after the layer map), routed_experts of the generated
tokens when the decode server returned them, and, as keys fit skips, the
decode server that answered and how it was chosen.

Lines are written by a thread of their own, so a request never waits for the
disk; when it falls behind by more than `backlog` requests, the newest are
dropped and counted.
"""
import json
import os
import queue
import threading

ID_MAX = 63  # bytes: locus_trace's id field holds 64 with its NUL


def _id(text):
    raw = str(text).encode("utf-8")[:ID_MAX]
    return raw.decode("utf-8", errors="ignore")


class Recorder:
    """Appends to path (a new file: created or emptied). The header follows
    the first request: its n_layers and k; n_experts when known."""

    def __init__(self, path, backlog=1024):
        self.path = path
        self.f = open(path, "w", encoding="utf-8")
        self.shape = None
        self.recorded = self.dropped = self.mismatched = 0
        self.error = None
        self.q = queue.Queue(maxsize=backlog)
        self.t = threading.Thread(target=self._run, name="trace-recorder", daemon=True)
        self.t.start()

    def record(self, request_id, prompt, decoder, how, n_experts=None, generated=None):
        """Queue one request. prompt: int array [tokens, layers, k]; generated:
        the same for the generated tokens, or None. A shape other than the
        trace's first is not recorded (a trace has one shape), counted."""
        shape = prompt.shape[1:]
        if self.shape is None:
            self.shape = shape
            head = {"locus_trace": 1, "n_layers": int(shape[0]), "k": int(shape[1])}
            if n_experts:
                head["n_experts"] = int(n_experts)
            self._put(head, False)
        elif shape != self.shape:
            self.mismatched += 1
            return False
        line = {"id": _id(request_id), "prompt_routed_experts": prompt}
        if generated is not None and generated.shape[1:] == shape and len(generated):
            line["routed_experts"] = generated
        line["decoder"] = int(decoder)
        line["route"] = how
        return self._put(line, True)

    def _put(self, line, request):
        try:
            self.q.put_nowait((line, request))
            return True
        except queue.Full:
            self.dropped += 1
            return False

    def _run(self):
        while True:
            item = self.q.get()
            if item is None:
                break
            line, request = item
            for key in ("prompt_routed_experts", "routed_experts"):
                if key in line:  # serialised here, off the request's path
                    line[key] = line[key].tolist()
            try:
                self.f.write(json.dumps(line, separators=(",", ":")) + "\n")
                if self.q.empty():
                    self.f.flush()
                self.recorded += request
            except OSError as e:
                self.error = f"{self.path}: {e}"
                self.dropped += 1

    def close(self):
        """Write what is queued and close the file."""
        self.q.put(None)
        self.t.join(30)
        try:
            self.f.flush()
            os.fsync(self.f.fileno())
        except OSError as e:
            self.error = f"{self.path}: {e}"
        self.f.close()

    def stats(self):
        return {"file": self.path, "requests": self.recorded,
                "dropped": self.dropped, "other_shape": self.mismatched,
                "error": self.error}
