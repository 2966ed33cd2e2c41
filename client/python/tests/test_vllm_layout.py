"""The vLLM backend's layout from a loader's copies: the box a view of a checkpoint tensor
covers, the bounding box of several, and the recorder that reads them off copies made on
the meta device (without writing anything that is not meta)."""
import unittest

import torch

from refit.shards import Box
from refit.vllm.loader_layout import _CopyRecorder, box_of_view, bounding_box


def box(offset, extent, shape):
    return Box(shape, offset, extent)


class BoxOfViewTest(unittest.TestCase):
    def test_narrowed_rows_and_columns_are_boxes(self):
        full = torch.empty(8, 6, device="meta")
        self.assertEqual(box_of_view(full.narrow(0, 4, 4), (8, 6)), box((4, 0), (4, 6), (8, 6)))
        self.assertEqual(box_of_view(full.narrow(1, 3, 3), (8, 6)), box((0, 3), (8, 3), (8, 6)))
        self.assertEqual(box_of_view(full[2:5, 1:4], (8, 6)), box((2, 1), (3, 3), (8, 6)))
        self.assertEqual(box_of_view(full, (8, 6)), box((0, 0), (8, 6), (8, 6)))

    def test_one_expert_of_stacked_experts_and_a_chunk_of_it(self):
        experts = torch.empty(4, 10, 6, device="meta")  # [E, 2I, H], gate then up
        up = experts[2].chunk(2, dim=0)[1]
        self.assertEqual(box_of_view(up, (4, 10, 6)), box((2, 5, 0), (1, 5, 6), (4, 10, 6)))

    def test_a_transposed_view_covers_the_same_box(self):
        full = torch.empty(8, 6, device="meta")
        self.assertEqual(box_of_view(full[4:, :3].t(), (8, 6)), box((4, 0), (4, 3), (8, 6)))

    def test_stepped_and_expanded_views_are_not_boxes(self):
        full = torch.empty(8, 6, device="meta")
        self.assertIsNone(box_of_view(full[::2], (8, 6)))
        self.assertIsNone(box_of_view(full[:1].expand(4, 6), (8, 6)))

    def test_bounding_box_holds_every_box(self):
        parts = [box((0, 2), (2, 2), (8, 6)), box((5, 0), (1, 3), (8, 6))]
        self.assertEqual(bounding_box(parts), box((0, 0), (6, 4), (8, 6)))


class CopyRecorderTest(unittest.TestCase):
    def test_reads_of_the_checkpoint_tensor_are_recorded_and_nothing_real_is_written(self):
        checkpoint = torch.empty(8, 4, device="meta")
        parameter = torch.empty(4, 4, device="meta")
        bias = torch.zeros(4)  # a live tensor: the dry run must leave it alone
        recorder = _CopyRecorder(checkpoint)
        with torch.no_grad(), recorder:
            parameter[:2].copy_(checkpoint.narrow(0, 4, 2))
            bias.copy_(checkpoint[0])
        self.assertEqual(recorder.reads, [box((4, 0), (2, 4), (8, 4)),
                                          box((0, 0), (1, 4), (8, 4))])
        self.assertEqual(recorder.written_dtypes, {torch.float32})
        self.assertTrue(torch.equal(bias, torch.zeros(4)))

    def test_a_copy_from_a_computed_tensor_is_marked_unknown(self):
        checkpoint = torch.empty(8, 4, device="meta")
        parameter = torch.empty(8, 4, device="meta", dtype=torch.float64)
        recorder = _CopyRecorder(checkpoint)
        with torch.no_grad(), recorder:
            parameter.copy_(torch.cat([checkpoint[4:], checkpoint[:4]]))
        self.assertEqual(recorder.reads, [None])
        self.assertEqual(recorder.written_dtypes, {torch.float64})


if __name__ == "__main__":
    unittest.main()
