"""Shards: boxes are checked, split and replicated cut the right pieces."""
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
            refit.Shard((4, 4), (0, 2), (4, 3))
        with self.assertRaisesRegex(ValueError, "needs 2 offsets and extents"):
            refit.Shard((4, 4), (0,), (4, 4))
        with self.assertRaisesRegex(ValueError, "3 parts do not divide dim 0 of size 4"):
            refit.split((4, 4), 0, 0, 3)
        with self.assertRaisesRegex(ValueError, "part 2 of 2"):
            refit.split((4, 4), 0, 2, 2)


if __name__ == "__main__":
    unittest.main()
