"""refit's exceptions: every failure a caller sees is a RefitError with its gRPC code,
DATA_LOSS has its own class, and arguments the client refuses itself are RefitInvalidInput,
which is also the ValueError or KeyError such errors were before."""
import unittest

import grpc
import torch

import refit
from refit.errors import error_for


class ErrorClassesTest(unittest.TestCase):
    def test_data_loss_has_its_own_class(self):
        error = error_for(grpc.StatusCode.DATA_LOSS,
                          "destination rank 0: version 5 was committed but not copied")
        self.assertIs(type(error), refit.RefitDataLoss)
        self.assertIsInstance(error, refit.RefitError)
        self.assertEqual(error.code, grpc.StatusCode.DATA_LOSS)

    def test_invalid_input_is_a_rejection_a_value_error_and_a_key_error(self):
        error = refit.RefitInvalidInput("rank 3: tensor w has no box")
        for kind in (refit.RefitError, refit.RefitRejected, ValueError, KeyError):
            self.assertIsInstance(error, kind)
        self.assertEqual(error.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(error.message, "rank 3: tensor w has no box")
        self.assertEqual(str(error), "INVALID_ARGUMENT: rank 3: tensor w has no box")  # unquoted


class InvalidRegistrationTest(unittest.TestCase):
    """Refused by the client before refitd is asked (no refitd listens here)."""

    def setUp(self):
        self.daemon = refit.LocalDaemon("/nonexistent/refitd.sock")
        self.addCleanup(self.daemon.close)

    def test_a_tensor_of_another_shape_than_its_box(self):
        with self.assertRaises(refit.RefitError) as raised:
            self.daemon.register_destination(
                0, tensors={"w": torch.zeros(4, 4)}, boxes={"w": refit.split((8, 4), 0, 0, 4)})
        self.assertIsInstance(raised.exception, refit.RefitInvalidInput)
        self.assertIsInstance(raised.exception, ValueError)
        self.assertIn("rank 0: tensor w has shape (4, 4) but its box", raised.exception.message)

    def test_a_tensor_without_a_box(self):
        with self.assertRaises(KeyError) as raised:
            self.daemon.register_source(1, tensors={"w": torch.zeros(2)}, boxes={})
        self.assertIsInstance(raised.exception, refit.RefitInvalidInput)
        self.assertIn("rank 1: tensor w has no box", str(raised.exception))

    def test_arguments_that_do_not_go_together(self):
        with self.assertRaises(refit.RefitInvalidInput):
            self.daemon.register_destination(0, dtypes={"w": torch.float32})
        with self.assertRaises(refit.RefitInvalidInput):
            self.daemon.register_destination(
                0, shards={"w": (refit.replicated((2,)), torch.float32)},
                tensors={"w": torch.zeros(2)})
        with self.assertRaisesRegex(refit.RefitInvalidInput, "complex64 has no refit equivalent"):
            self.daemon.register_source(0, {"w": (refit.replicated((2,)), torch.complex64)})

    def test_layouts_the_client_builds(self):
        with self.assertRaises(refit.RefitInvalidInput):
            refit.Box((4,), (2,), (3,))
        with self.assertRaises(refit.RefitInvalidInput):
            refit.DeviceMesh((2, 2)).box_of(4, (8,), [refit.Shard(0), refit.Replicate()])


if __name__ == "__main__":
    unittest.main()
