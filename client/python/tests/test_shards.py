"""Boxes: checked; split, chunk and replicated cut the right pieces."""
import unittest

import refit


class ShardTest(unittest.TestCase):
    def test_split_cuts_equal_parts_of_one_dimension(self):
        shard = refit.split((8, 6), 1, 2, 3)
        self.assertEqual(shard.offset, (0, 4))
        self.assertEqual(shard.extent, (8, 2))
        self.assertEqual(shard.elements, 16)
        self.assertEqual(shard.slices(), (slice(0, 8), slice(4, 6)))

    def test_replicated_is_the_whole_tensor(self):
        shard = refit.replicated((3, 5))
        self.assertEqual((shard.offset, shard.extent), ((0, 0), (3, 5)))

    def test_bad_boxes_are_refused_with_the_reason(self):
        with self.assertRaisesRegex(ValueError, "leaves the tensor of shape \\(4, 4\\) in dim 1"):
            refit.Box((4, 4), (0, 2), (4, 3))
        with self.assertRaisesRegex(ValueError, "needs 2 offsets and extents"):
            refit.Box((4, 4), (0,), (4, 4))
        with self.assertRaisesRegex(ValueError, "3 parts do not divide dim 0 of size 4"):
            refit.split((4, 4), 0, 0, 3)
        with self.assertRaisesRegex(ValueError, "part 2 of 2"):
            refit.split((4, 4), 0, 2, 2)

    def test_chunk_cuts_as_torch_chunk_does_with_empty_trailing_parts(self):
        import torch

        for size, parts in ((8, 3), (5, 4), (2, 3), (7, 7), (1, 4)):
            pieces = torch.arange(size).chunk(parts)
            for index in range(parts):
                box = refit.chunk((size, 3), 0, index, parts)
                expected = pieces[index].tolist() if index < len(pieces) else []
                self.assertEqual(list(range(box.offset[0], box.offset[0] + box.extent[0])),
                                 expected, (size, parts, index))
        self.assertTrue(refit.chunk((2, 3), 0, 2, 3).empty)
        with self.assertRaisesRegex(ValueError, "leaves the tensor"):
            refit.Box((4,), (2,), (-1,))


if __name__ == "__main__":
    unittest.main()
