"""An engine of the dense model that serves it in FP8: every linear weight of the decoder
layers is held as E4M3 codes (uint8 tensors: torch 1.x has no float8 dtype) with one
float32 scale per 64 x 64 block (`<name>_scale_inv`, vLLM's and DeepSeek-V3's
weight_scale_inv), sharded by tensor parallelism like its weight; the embeddings, norms and
lm_head stay float32. The trainers hold float32: refit quantizes on the trainers' side, so
codes and scales cross, not float32. After each version every code and scale is compared
with an independent torch quantizer (fp8_reference.py) of the trainers' weights.

    dense_fp8_inference.py --socket S --out DIR [--steps N]
"""
import os

import torch

import refit
from dense import arguments, global_shapes
from dense_inference import trainer_weights
from fp8_reference import quantize_blocks
from refit import conventions

BLOCK = (64, 64)  # the dense model's TP shards are whole 64-row blocks (128 would cut k/v)


def held_in_fp8(name, shape):
    return name.startswith("model.layers.") and len(shape) >= 2


def blocks_of(box):
    """The box of block scales covering `box` (which starts at a block corner)."""
    grid = [(n + b - 1) // b for n, b in zip(box.global_shape, BLOCK)]
    offset = [o // b for o, b in zip(box.offset, BLOCK)]
    end = [(o + e + b - 1) // b for o, e, b in zip(box.offset, box.extent, BLOCK)]
    return refit.Box(grid, offset, [e - o for e, o in zip(end, offset)])


def engine(tp_rank, tp):
    """The tensors, boxes and quantized weights of TP rank `tp_rank` (initially -1 / 0xFF)."""
    tensors, boxes, quantized = {}, {}, {}
    for name, shape in global_shapes().items():
        box = conventions.megatron_box(name, shape, tp_rank, tp)
        boxes[name] = box
        if held_in_fp8(name, shape):
            scale = name + "_scale_inv"
            boxes[scale] = blocks_of(box)
            tensors[name] = torch.full(box.extent, 0xFF, dtype=torch.uint8)
            tensors[scale] = torch.full(boxes[scale].extent, -1.0)
            quantized[name] = refit.BlockFp8(scale, BLOCK)
        else:
            tensors[name] = torch.full(box.extent, -1.0)
    return tensors, boxes, quantized


def wrong_tensors(engines, full):
    """"rank R name" of every tensor that is not the reference's quantization (or, for the
    float32 ones, the trainers' weights)."""
    reference = {name: quantize_blocks(full[name], BLOCK)
                 for name, shape in global_shapes().items() if held_in_fp8(name, shape)}
    wrong = []
    for tp_rank, (tensors, boxes, quantized) in enumerate(engines):
        for name, tensor in tensors.items():
            if name in quantized:
                expected = reference[name][0][boxes[name].slices()]
            elif name.endswith("_scale_inv"):
                expected = reference[name[:-len("_scale_inv")]][1][boxes[name].slices()]
            else:
                expected = full[name][boxes[name].slices()]
            if not torch.equal(tensor, expected):
                wrong.append(f"rank {tp_rank} {name}")
    return wrong


def main():
    args = arguments(__doc__).parse_args()
    engines = [engine(r, args.tp) for r in range(args.tp)]
    with refit.LocalDaemon(args.socket) as daemon:
        for tp_rank, (tensors, boxes, quantized) in enumerate(engines):
            daemon.register_destination(tp_rank, tensors=tensors, boxes=boxes,
                                        quantized=quantized)
        for version in range(args.first_version, args.first_version + args.steps):
            daemon.wait_for_version(version, timeout=60)
            wrong = wrong_tensors(engines, trainer_weights(args.out, version, args.tp))
            if wrong:
                raise SystemExit(f"version {version}: wrong tensors: {', '.join(wrong)}")
            codes = sum(len(q) for _, _, q in engines)
            others = sum(len(t) for t, _, _ in engines) - 2 * codes
            print(f"version {version}: {codes} FP8 weights and their scales equal to the "
                  f"reference quantizer's, {others} float32 tensors equal to the trainers'",
                  flush=True)
            open(os.path.join(args.out, f"checked-{version}"), "w").close()


if __name__ == "__main__":
    main()
