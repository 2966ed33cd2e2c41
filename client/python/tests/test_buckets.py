"""The bucketed path's client half without a daemon: the bucket is an owner-only segment,
the views carry boxes and no memory, a piece refitd describes becomes a tensor over the
bucket and the place in the rank's shard it belongs, and copy_into puts it there."""
import os
import stat
import unittest

import torch

import refit
from refit._proto import refit_pb2
from refit.buckets import BucketMemory


class BucketsTest(unittest.TestCase):
    def setUp(self):
        # This rank holds rows 4..8 of a [8, 6] tensor (its shard is [4, 6]).
        self.box = refit.split((8, 6), 0, 1, 2)
        self.memory = BucketMemory(3, {"w": self.box}, {"w": torch.bfloat16}, 1 << 16)

    def tearDown(self):
        self.memory.close()

    def test_the_registration_is_boxes_and_one_owner_only_bucket(self):
        (view,) = self.memory.views
        self.assertEqual((view.tensor, tuple(view.offset), tuple(view.extent), view.buffer),
                         ("w", (4, 0), (4, 6), ""))
        (bucket,) = self.memory.buffers
        path = "/dev/shm/" + bucket.shm_name.lstrip("/")
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        self.assertEqual(os.stat(path).st_size, 1 << 16)
        self.memory.close()
        self.assertFalse(os.path.exists(path))

    def test_a_piece_is_copied_to_its_place_in_the_shard(self):
        # refitd put the global box rows 5..7, columns 2..5 at byte 128 of the bucket.
        message = refit_pb2.BucketPiece(tensor="w", offset=[5, 2], extent=[2, 3],
                                        byte_offset=128)
        piece = self.memory.piece(message)
        self.assertEqual(piece.local, (slice(1, 3), slice(2, 5)))
        self.assertEqual(piece.tensor.dtype, torch.bfloat16)
        values = torch.arange(6, dtype=torch.bfloat16).view(2, 3)
        piece.tensor.copy_(values)  # as refitd would have written it
        shard = torch.zeros(4, 6, dtype=torch.bfloat16)
        refit.copy_into(lambda: {"w": shard})(refit.Bucket(1, "e", 1, True, [piece]))
        expected = torch.zeros(4, 6, dtype=torch.bfloat16)
        expected[1:3, 2:5] = values
        self.assertTrue(torch.equal(shard, expected))

    def test_pieces_outside_the_bucket_or_the_rank_are_refused(self):
        with self.assertRaisesRegex(ValueError, "leaves the bucket"):
            self.memory.piece(refit_pb2.BucketPiece(tensor="w", offset=[4, 0], extent=[4, 6],
                                                    byte_offset=(1 << 16) - 8))
        with self.assertRaisesRegex(KeyError, "did not register"):
            self.memory.piece(refit_pb2.BucketPiece(tensor="v", offset=[0], extent=[1]))
        shard = {"other": torch.zeros(1)}
        piece = self.memory.piece(refit_pb2.BucketPiece(tensor="w", offset=[4, 0],
                                                        extent=[1, 1]))
        with self.assertRaisesRegex(KeyError, "the weights do not have"):
            refit.copy_into(lambda: shard)(refit.Bucket(2, "e", 1, False, [piece]))

    def test_a_bucketed_registration_needs_its_dtypes_and_a_real_bucket(self):
        with self.assertRaisesRegex(KeyError, "need both a box and a dtype"):
            BucketMemory(0, {"w": self.box}, {}, 1 << 16)
        with self.assertRaisesRegex(ValueError, "too small"):
            BucketMemory(0, {"w": self.box}, {"w": torch.float32}, 100)


if __name__ == "__main__":
    unittest.main()
