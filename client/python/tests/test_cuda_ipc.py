"""CUDA IPC handles: torch 2.x shares a caching-allocator block as a versioned handle
(version byte, type byte, payload) and refitd takes only the bare 64-byte
cudaIpcMemHandle_t, so every CUDA registration (refit's memory and the framework's tensors)
hands refitd the payload, and a form refit does not know is refused naming the memory."""
import unittest

import torch

import refit
from refit.cuda_ipc import cuda_ipc_handle
from refit.in_place import InPlaceMemory
from refit.memory import RankMemory


class CudaIpcHandleTest(unittest.TestCase):
    raw = bytes(range(64))

    def test_the_bare_handle_of_torch_1_passes_through(self):
        self.assertEqual(cuda_ipc_handle("w", self.raw), self.raw)

    def test_torch_2s_versioned_cuda_malloc_handle_gives_its_64_byte_payload(self):
        for version in (1, 2, 3):
            handle = cuda_ipc_handle("w", bytes([version]) + b"c" + self.raw)
            self.assertEqual(len(handle), 64)
            self.assertEqual(handle, self.raw)

    def test_an_unknown_version_is_refused(self):
        for version in (0, 4, ord("c")):
            with self.assertRaisesRegex(refit.RefitInvalidInput,
                                        f"rank 0: tensor w: .*handle of version {version}, "
                                        f"which refit does not know"):
                cuda_ipc_handle("rank 0: tensor w", bytes([version]) + b"c" + self.raw)

    def test_an_expandable_segment_is_refused_naming_the_tensor(self):
        for payload in (bytes(40), self.raw):
            with self.assertRaisesRegex(refit.RefitInvalidInput,
                                        "layers.0.w: .*expandable_segments:False"):
                cuda_ipc_handle("layers.0.w", b"\x02e" + payload)

    def test_an_unknown_length_is_refused_naming_the_tensor(self):
        for length in (0, 1, 63, 65, 67, 70):
            with self.assertRaisesRegex(refit.RefitInvalidInput,
                                        f"w: .*a {length}-byte handle that refit does not know"):
                cuda_ipc_handle("w", bytes([2]) + bytes(length - 1) if length else b"")


@unittest.skipUnless(torch.cuda.is_available(), "needs a CUDA device")
class CudaRegistrationTest(unittest.TestCase):
    """What each way of registering CUDA memory hands refitd, under this torch."""

    def test_refit_allocated_memory_is_named_by_the_bare_handle(self):
        memory = RankMemory(0, {"w": (refit.replicated((256,)), torch.float32)}, device="cuda")
        try:
            self.assertEqual(len(memory.buffer.cuda_ipc_handle), 64)
        finally:
            memory.close()

    def test_tensors_in_place_are_named_by_the_bare_handle(self):
        weight = torch.zeros(256, device="cuda")
        memory = InPlaceMemory(0, {"w": weight}, {"w": refit.replicated((256,))})
        self.assertEqual([len(b.cuda_ipc_handle) for b in memory.buffers], [64])


if __name__ == "__main__":
    unittest.main()
