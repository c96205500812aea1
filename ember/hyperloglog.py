"""HyperLogLog sketches for countApproxDistinct (the JVM uses HyperLogLog++ there too)."""
from __future__ import annotations

import math

_MASK64 = (1 << 64) - 1


def _mix64(x: int) -> int:
    """splitmix64 finalizer: spreads portable_hash (identity for ints) over 64 bits."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


class HyperLogLog:
    def __init__(self, p: int) -> None:
        self.p = p
        self.registers = bytearray(1 << p)

    @staticmethod
    def precision_for(relative_sd: float) -> int:
        return max(4, min(18, math.ceil(2 * math.log2(1.106 / relative_sd))))

    def add(self, h: int) -> None:
        x = _mix64(h & _MASK64)
        p = self.p
        idx = x >> (64 - p)
        w = (x << p) & _MASK64
        rank = (64 - w.bit_length()) + 1 if w else 64 - p + 1
        if rank > self.registers[idx]:
            self.registers[idx] = rank

    @staticmethod
    def merge_estimate(p: int, sketches: list[bytearray]) -> int:
        m = 1 << p
        regs = bytearray(m)
        for s in sketches:
            for i, r in enumerate(s):
                if r > regs[i]:
                    regs[i] = r
        alpha = {16: 0.673, 32: 0.697, 64: 0.709}.get(m, 0.7213 / (1 + 1.079 / m))
        est = alpha * m * m / sum(2.0 ** -r for r in regs)
        zeros = regs.count(0)
        if est <= 2.5 * m and zeros:
            est = m * math.log(m / zeros)
        return int(round(est))
