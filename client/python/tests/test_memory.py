"""Rank memory: one shared-memory segment per rank, owner-only, views aligned and backed by
it, the name gone at close; torch dtypes map to refit's."""
import os
import stat
import unittest

import torch

import refit
from refit.memory import RankMemory


class MemoryTest(unittest.TestCase):
    def test_tensors_live_in_one_owner_only_segment(self):
        shards = {"w": (refit.split((8, 6), 0, 1, 2), torch.float32),
                  "b": (refit.replicated((3,)), torch.bfloat16)}
        memory = RankMemory(5, shards)
        path = "/dev/shm/" + memory.buffer.shm_name.lstrip("/")
        try:
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
            self.assertEqual(memory.buffer.bytes, os.stat(path).st_size)
            self.assertEqual([v.tensor for v in memory.views], ["w", "b"])
            self.assertEqual([v.byte_offset % 256 for v in memory.views], [0, 0])
            self.assertEqual(tuple(memory.tensors["w"].shape), (4, 6))
            self.assertEqual(memory.tensors["b"].dtype, torch.bfloat16)
            # A write through the tensor is in the segment, at the view's offset.
            memory.tensors["w"][0, 1] = 2.5
            with open(path, "rb") as segment:
                data = segment.read()
            offset = memory.views[0].byte_offset + 4
            self.assertEqual(torch.frombuffer(bytearray(data[offset:offset + 4]),
                                              dtype=torch.float32).item(), 2.5)
        finally:
            memory.close()
        self.assertFalse(os.path.exists(path))

    def test_dtypes(self):
        self.assertEqual(refit.refit_dtype(torch.bfloat16), "BF16")
        self.assertEqual(refit.refit_dtype(torch.int64), "I64")
        with self.assertRaisesRegex(ValueError, "complex64 has no refit equivalent"):
            refit.refit_dtype(torch.complex64)

    def test_other_devices_are_refused(self):
        with self.assertRaisesRegex(ValueError, "rank 0: refit holds CPU or CUDA tensors, not meta"):
            RankMemory(0, {"w": (refit.replicated((2,)), torch.float32)}, device="meta")


def own_segments():
    """The shared-memory segments this process's client made (other tests share /dev/shm)."""
    prefix = f"refit-py-{os.getpid()}-"
    return {name for name in os.listdir("/dev/shm") if name.startswith(prefix)}


class UnreachableDaemonTest(unittest.TestCase):
    def test_a_missing_daemon_is_a_clear_error_and_leaves_no_segment(self):
        before = own_segments()
        daemon = refit.LocalDaemon("/nonexistent/refitd.sock")
        with self.assertRaises(refit.RefitError) as raised:
            daemon.register_source(0, {"w": (refit.replicated((2,)), torch.float32)},
                                   timeout=1)
        self.assertIn(raised.exception.code.name, ("UNAVAILABLE", "DEADLINE_EXCEEDED"))
        daemon.close()
        self.assertEqual(own_segments() - before, set())


if __name__ == "__main__":
    unittest.main()
