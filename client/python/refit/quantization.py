"""Destination tensors held quantized: refit quantizes on the way, where the whole block is
(the trainers' daemons), so the network carries the codes and scales.

    daemon.register_destination(rank, tensors=..., boxes=...,
                                quantized={"...q_proj.weight": refit.BlockFp8(
                                    "...q_proj.weight_scale_inv")})

CastToBf16: a bfloat16 weight registered from float32 trainers, rounded on the way.
DequantizeFp8: the reverse of BlockFp8, a bfloat16 or float32 weight whose trainers hold E4M3
codes (registered with `fp8_codes=[name]`) and the float32 scales of their blocks in a source
tensor: the codes and scales cross, and the inference side's refitd writes code * scale.

A BlockFp8 weight is held as E4M3 codes: a torch.uint8 tensor (torch 1.x has no float8
dtype; its bytes are the codes, the way vLLM's float8_e4m3fn weights hold them) or a
torch.float8_e4m3fn one, plus a float32 tensor of one scale per block (vLLM's and
DeepSeek-V3's `weight_scale_inv`, x ~ code * scale), registered with the box of its blocks.
The recipe is DeepGEMM's: per block amax = max |x| (at least 1e-4), code =
E4M3(x * (448 / amax)) rounded to nearest even and saturated, scale = amax / 448.
"""
from dataclasses import dataclass
from typing import Tuple

SCHEME_BLOCK_FP8 = "block_fp8"
SCHEME_CAST = "cast"
SCHEME_DEQUANTIZE = "dequantize"


@dataclass(frozen=True)
class BlockFp8:
    """A weight in FP8 E4M3 with one float32 scale per block (of `block`, over the last two
    dims; default 128 x 128; (1, columns) for one scale per output channel) in the
    destination tensor `scale_tensor`. `recipe`: "deepgemm" (the default: code =
    E4M3(x * (448 / amax))), "divide" (code = E4M3(x / scale), as vLLM and torch quantize)
    or "pow2" (power-of-two scales, 2^ceil(log2(amax / 448)))."""
    scale_tensor: str
    block: Tuple[int, int] = (128, 128)
    recipe: str = ""


@dataclass(frozen=True)
class CastToBf16:
    """A bfloat16 weight whose trainers hold float32 (an FSDP2 trainer's sharded parameters):
    refit rounds each value to nearest even on the trainers' side, so 2 bytes an element
    cross. Any boxes."""


@dataclass(frozen=True)
class DequantizeFp8:
    """A bfloat16 or float32 weight whose trainers hold its E4M3 codes and one float32 scale
    per block (of `block` over the last two dims; default 128 x 128) in the source tensor
    `scale_tensor`: each value is code * scale (the product in float32, rounded to nearest
    even for bfloat16), written by the inference side's refitd after the codes and scales
    arrive. Any boxes."""
    scale_tensor: str
    block: Tuple[int, int] = (128, 128)


def codes_dtype_ok(dtype) -> bool:
    """Whether a torch tensor of `dtype` can hold E4M3 codes (uint8 bytes or float8_e4m3fn)."""
    return str(dtype) in ("torch.uint8", "torch.float8_e4m3fn")
