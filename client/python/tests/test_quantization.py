"""FP8 destinations in the registration: quantized tensors are declared F8_E4M3 with their
recipe, and what cannot hold codes or scales is refused with the reason."""
import types
import unittest

import torch

import refit
from refit.daemon import _FP8_CODES, _tensor_specs


def memory(**dtypes):
    boxes = {name: refit.replicated((256, 128)) for name in dtypes}
    boxes["w_scale_inv"] = refit.replicated((2, 1))
    return types.SimpleNamespace(boxes=boxes, dtypes=dict(dtypes))


class QuantizationTest(unittest.TestCase):
    def test_a_quantized_weight_is_declared_in_codes_with_its_recipe(self):
        specs = {s.name: s for s in _tensor_specs(
            0, memory(w=torch.uint8, w_scale_inv=torch.float32, norm=torch.bfloat16),
            {"w": refit.BlockFp8("w_scale_inv")})}
        self.assertEqual(specs["w"].dtype, "F8_E4M3")
        self.assertEqual(specs["w"].quantization.scheme, "block_fp8")
        self.assertEqual(specs["w"].quantization.scale_tensor, "w_scale_inv")
        self.assertEqual(list(specs["w"].quantization.block), [128, 128])
        self.assertEqual(specs["w"].quantization.recipe, "")
        per_channel = _tensor_specs(
            0, memory(w=torch.uint8, w_scale_inv=torch.float32),
            {"w": refit.BlockFp8("w_scale_inv", (1, 128), recipe="divide")})[0]
        self.assertEqual(list(per_channel.quantization.block), [1, 128])
        self.assertEqual(per_channel.quantization.recipe, "divide")
        self.assertEqual(specs["w_scale_inv"].dtype, "F32")
        self.assertFalse(specs["norm"].HasField("quantization"))
        self.assertEqual(specs["norm"].dtype, "BF16")

    def test_a_cast_weight_is_declared_bfloat16_with_its_recipe(self):
        spec = _tensor_specs(0, memory(w=torch.bfloat16, w_scale_inv=torch.float32),
                             {"w": refit.CastToBf16()})[0]
        self.assertEqual((spec.dtype, spec.quantization.scheme), ("BF16", "cast"))
        self.assertEqual(spec.quantization.scale_tensor, "")
        with self.assertRaisesRegex(ValueError, "tensor w is cast to bfloat16, so it is "
                                                "bfloat16, not torch.float32"):
            _tensor_specs(0, memory(w=torch.float32, w_scale_inv=torch.float32),
                          {"w": refit.CastToBf16()})

    def test_a_dequantized_weight_and_its_sources_codes_are_declared(self):
        spec = _tensor_specs(0, memory(w=torch.bfloat16, w_scale_inv=torch.float32),
                             {"w": refit.DequantizeFp8("w_scale_inv", (64, 64))})[0]
        self.assertEqual((spec.dtype, spec.quantization.scheme), ("BF16", "dequantize"))
        self.assertEqual(spec.quantization.scale_tensor, "w_scale_inv")
        self.assertEqual(list(spec.quantization.block), [64, 64])
        # A trainer's codes (register_source's fp8_codes): F8_E4M3, no recipe of their own.
        codes = {s.name: s for s in _tensor_specs(
            0, memory(w=torch.uint8, w_scale_inv=torch.float32), {"w": _FP8_CODES})}
        self.assertEqual(codes["w"].dtype, "F8_E4M3")
        self.assertFalse(codes["w"].HasField("quantization"))
        self.assertEqual(codes["w_scale_inv"].dtype, "F32")
        with self.assertRaisesRegex(ValueError, "tensor w is dequantized, so it is bfloat16 or "
                                                "float32, not torch.uint8"):
            _tensor_specs(0, memory(w=torch.uint8, w_scale_inv=torch.float32),
                          {"w": refit.DequantizeFp8("w_scale_inv")})
        with self.assertRaisesRegex(ValueError, "tensor w holds E4M3 codes, so it is uint8 or "
                                                "float8_e4m3fn, not torch.float32"):
            _tensor_specs(0, memory(w=torch.float32, w_scale_inv=torch.float32),
                          {"w": _FP8_CODES})

    def test_what_cannot_hold_codes_or_scales_is_refused(self):
        with self.assertRaisesRegex(ValueError, "tensor w holds E4M3 codes, so it is uint8 or "
                                                "float8_e4m3fn, not torch.bfloat16"):
            _tensor_specs(1, memory(w=torch.bfloat16, w_scale_inv=torch.float32),
                          {"w": refit.BlockFp8("w_scale_inv")})
        with self.assertRaisesRegex(ValueError, "the scales of w, w_scale_inv, are a registered "
                                                "float32 tensor, not torch.bfloat16"):
            _tensor_specs(1, memory(w=torch.uint8, w_scale_inv=torch.bfloat16),
                          {"w": refit.BlockFp8("w_scale_inv")})
        with self.assertRaisesRegex(KeyError, r"quantized tensors \['v'\] are not registered"):
            _tensor_specs(1, memory(w=torch.uint8, w_scale_inv=torch.float32),
                          {"v": refit.BlockFp8("w_scale_inv")})


if __name__ == "__main__":
    unittest.main()
