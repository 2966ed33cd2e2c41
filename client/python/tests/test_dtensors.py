"""Tensors registered without boxes: plain tensors are whole; with boxes, each is its own."""
import unittest

import torch

from refit.dtensors import local_shards
from refit.shards import Box


class LocalShardsTest(unittest.TestCase):
    def test_plain_tensors_without_boxes_are_whole_tensors(self):
        weight = torch.zeros(4, 3)
        tensors, boxes = local_shards({"w": weight})
        self.assertIs(tensors["w"], weight)
        self.assertEqual(boxes["w"], Box((4, 3), (0, 0), (4, 3)))

    def test_given_boxes_are_kept_and_none_is_made_up(self):
        given = {"w": Box((8, 3), (4, 0), (4, 3))}
        tensors, boxes = local_shards({"w": torch.zeros(4, 3), "b": torch.zeros(3)}, given)
        self.assertEqual(boxes, given)  # "b" has none: registering it is refused by name


if __name__ == "__main__":
    unittest.main()
