"""The vLLM backend's assembly of checkpoint tensors from bucket pieces: a tensor is handed
over once its worker's box is whole, with the pieces where they belong in the full shape;
the bytes of tensors begun and not complete are counted."""
import unittest

import torch

from refit.buckets import BucketPiece
from refit.shards import Box
from refit.vllm.assembly import TensorAssembly


def piece(name, box, values):
    return BucketPiece(name=name, box=box, local=(), tensor=values)


class TensorAssemblyTest(unittest.TestCase):
    def test_a_tensor_is_whole_once_its_box_arrived_in_any_order(self):
        # The worker needs rows 2..6 of an 8 x 3 tensor (its tensor-parallel half and more).
        box = Box((8, 3), (2, 0), (4, 3))
        assembly = TensorAssembly({"w": box}, {"w": torch.float32})
        rows = torch.arange(24, dtype=torch.float32).reshape(8, 3)
        self.assertIsNone(assembly.add(piece("w", Box((8, 3), (4, 0), (2, 3)), rows[4:6])))
        self.assertEqual(assembly.partial_bytes, 4 * 3 * 4)
        done = assembly.add(piece("w", Box((8, 3), (2, 0), (2, 3)), rows[2:4]))
        self.assertIsNotNone(done)
        self.assertEqual(tuple(done.shape), (8, 3))
        self.assertTrue(torch.equal(done[2:6], rows[2:6]))
        self.assertEqual(assembly.partial_bytes, 0)
        self.assertEqual(assembly.peak_partial_bytes, 48)

    def test_interleaved_tensors_count_what_is_begun_and_clear_forgets_it(self):
        boxes = {"a": Box((4,), (0,), (4,)), "b": Box((2, 2), (0, 0), (2, 2))}
        assembly = TensorAssembly(boxes, {"a": torch.float32, "b": torch.bfloat16})
        assembly.add(piece("a", Box((4,), (0,), (2,)), torch.ones(2)))
        assembly.add(piece("b", Box((2, 2), (0, 0), (1, 2)),
                           torch.ones(1, 2, dtype=torch.bfloat16)))
        self.assertEqual(assembly.partial_bytes, 4 * 4 + 4 * 2)
        assembly.clear()
        self.assertEqual((assembly.partial_bytes, assembly.peak_partial_bytes), (0, 0))
        # After a clear (a failed epoch's leftovers), a tensor starts again from nothing.
        self.assertIsNone(assembly.add(piece("a", Box((4,), (2,), (2,)), torch.ones(2))))


if __name__ == "__main__":
    unittest.main()
