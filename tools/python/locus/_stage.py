# SPDX-License-Identifier: MIT
"""The staging area's bookkeeping: which byte ranges of the client's stage
hold a request locusd may still read. A request's range is taken at submit
and given back at its completion (locusd reads the stage until then)."""


class Stage:
    """First-fit allocator over [0, size) in units of align bytes."""

    def __init__(self, size, align=64):
        self.size = size
        self.align = align
        self._free = [(0, size)]  # (offset, length), sorted, never adjacent
        self.used = 0

    def _round(self, n):
        return (n + self.align - 1) // self.align * self.align

    def alloc(self, n):
        """Offset of n free bytes (aligned), or None when no hole is that large."""
        n = self._round(max(n, 1))
        for i, (off, length) in enumerate(self._free):
            if length >= n:
                if length == n:
                    del self._free[i]
                else:
                    self._free[i] = (off + n, length - n)
                self.used += n
                return off
        return None

    def free(self, off, n):
        """Give back a range alloc returned for n bytes."""
        n = self._round(max(n, 1))
        lo, hi = 0, len(self._free)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._free[mid][0] < off:
                lo = mid + 1
            else:
                hi = mid
        i = lo
        if (i > 0 and self._free[i - 1][0] + self._free[i - 1][1] > off) or \
                (i < len(self._free) and off + n > self._free[i][0]):
            raise AssertionError(f"stage range {off}+{n} freed twice")
        self._free.insert(i, (off, n))
        # merge with the neighbours
        if i + 1 < len(self._free) and off + n == self._free[i + 1][0]:
            self._free[i] = (off, n + self._free[i + 1][1])
            del self._free[i + 1]
        if i > 0 and self._free[i - 1][0] + self._free[i - 1][1] == off:
            self._free[i - 1] = (self._free[i - 1][0], self._free[i - 1][1] + self._free[i][1])
            del self._free[i]
        self.used -= n

    def largest(self):
        return max((length for _, length in self._free), default=0)
