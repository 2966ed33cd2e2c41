"""How much more resident memory processes took while something ran, measured by the kernel:
each process's high-water mark (VmHWM) is reset to its resident size (`clear_refs` 5) when
the measurement starts and read when it ends, so no allocation is missed between samples.

    growth = PeakGrowth(pid, tree=True)   # the process and its children
    ...                                   # what is measured
    growth.bytes()                        # the sum of each process's peak above its start
"""
from typing import Dict

import psutil


def _status_bytes(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024  # kB
    raise KeyError(f"/proc/{pid}/status has no {field}")


class PeakGrowth:
    """The peak resident growth of process `pid` (with `tree`, of it and of each child it
    has at the start) since construction."""

    def __init__(self, pid: int, tree: bool = False):
        process = psutil.Process(pid)
        processes = [process] + (process.children(recursive=True) if tree else [])
        self.start: Dict[int, int] = {}
        for p in processes:
            try:
                with open(f"/proc/{p.pid}/clear_refs", "w") as clear_refs:
                    clear_refs.write("5")  # VmHWM := VmRSS
                self.start[p.pid] = _status_bytes(p.pid, "VmRSS")
            except (OSError, KeyError):
                pass  # ended meanwhile

    def bytes(self) -> int:
        total = 0
        for pid, start in self.start.items():
            try:
                total += max(0, _status_bytes(pid, "VmHWM") - start)
            except (OSError, KeyError):
                pass  # ended meanwhile: what it took is gone with it
        return total
