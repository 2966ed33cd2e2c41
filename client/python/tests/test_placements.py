"""Placements: a device mesh with Shard/Replicate per mesh dimension gives the boxes
DTensor gives (checked against torch.chunk applied mesh dimension by mesh dimension)."""
import itertools
import unittest

import torch

import refit
from refit import DeviceMesh, Replicate, Shard


def chunked_reference(full, mesh_shape, coordinate, placements):
    """The local part as DTensor cuts it: each mesh dimension in order chunks the part
    left by the ones before it (torch.chunk, empty trailing parts)."""
    local = full
    for size, index, placement in zip(mesh_shape, coordinate, placements):
        if isinstance(placement, Shard):
            pieces = local.chunk(size, dim=placement.dim)
            if index < len(pieces):
                local = pieces[index]
            else:
                shape = list(local.shape)
                shape[placement.dim] = 0
                local = local.new_empty(shape)
    return local


class PlacementTest(unittest.TestCase):
    def test_mesh_coordinates_are_row_major(self):
        mesh = DeviceMesh((2, 3), ("dp", "tp"))
        self.assertEqual([mesh.coordinate(r) for r in range(6)],
                         [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)])
        with self.assertRaisesRegex(ValueError, "rank 6 is not in a mesh of 6 ranks"):
            mesh.coordinate(6)

    def test_boxes_match_dtensor_chunking_for_every_rank(self):
        shape = (7, 5, 3)
        full = torch.arange(7 * 5 * 3).reshape(shape)
        cases = [((2, 3), [Shard(0), Shard(1)]), ((2, 2), [Shard(0), Shard(0)]),
                 ((4,), [Shard(-1)]), ((3, 2), [Replicate(), Shard(2)]),
                 ((8,), [Shard(0)]), ((2, 4), [Shard(1), Replicate()])]
        for mesh_shape, placements in cases:
            mesh = DeviceMesh(mesh_shape)
            for rank in range(mesh.size):
                box = mesh.box_of(rank, shape, placements)
                expected = chunked_reference(full, mesh_shape, mesh.coordinate(rank), placements)
                self.assertEqual(box.extent, tuple(expected.shape), (mesh_shape, placements, rank))
                if not box.empty:
                    self.assertTrue(torch.equal(full[box.slices()], expected))

    def test_every_element_is_held_once_per_replica(self):
        mesh = DeviceMesh((3, 2))
        counts = torch.zeros(5, 4, dtype=torch.int64)
        for rank in range(mesh.size):
            counts[mesh.box_of(rank, (5, 4), [Shard(0), Replicate()]).slices()] += 1
        self.assertTrue(torch.equal(counts, torch.full((5, 4), 2)))

    def test_bad_placements_are_refused_with_the_reason(self):
        mesh = DeviceMesh((2,))
        with self.assertRaisesRegex(ValueError, "2 placements for a 1-dim mesh"):
            mesh.box_of(0, (4,), [Shard(0), Replicate()])
        with self.assertRaisesRegex(ValueError, "Shard\\(2\\) of a 2-dim tensor"):
            mesh.box_of(0, (4, 4), [Shard(2)])
        with self.assertRaisesRegex(ValueError, "refit knows Shard\\(dim\\) and Replicate"):
            mesh.box_of(0, (4,), ["partial"])
        with self.assertRaisesRegex(ValueError, "every size must be positive"):
            DeviceMesh((2, 0))


if __name__ == "__main__":
    unittest.main()
