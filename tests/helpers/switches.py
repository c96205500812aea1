"""Context switches of one thread of this process, from /proc: the tests that a thread is
not woken (a wake-up shows as a switch, whatever the thread then did)."""
from __future__ import annotations


def context_switches(tid: int) -> int:
    """Voluntary plus involuntary switches of thread `tid` (a native id) so far."""
    with open(f"/proc/self/task/{tid}/status") as f:
        return sum(int(line.split()[1]) for line in f if "ctxt_switches" in line)
