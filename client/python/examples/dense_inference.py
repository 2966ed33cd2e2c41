"""The vLLM-style engine of the dense model: one process with TP ranks 0..tp-1, each
holding fused qkv_proj and gate_up_proj parameters, registered in place (refitd writes the
engine's parameters themselves). After each version it compares, with torch.equal, every
engine parameter with the trainers' shards of that version fused the engine's way.

    dense_inference.py --socket S --out DIR [--steps N]
"""
import os

import torch

import refit
from dense import (arguments, engine_parameters, global_shapes, resident_bytes, shard_file)
from refit import conventions


def trainer_weights(out, version, tp):
    """The full tensors of `version`, put together from every trainer's saved shards."""
    full = {name: torch.zeros(shape) for name, shape in global_shapes().items()}
    for tp_rank in range(tp):
        for name, shard in torch.load(shard_file(out, version, tp_rank)).items():
            full[name][conventions.megatron_box(name, full[name].shape, tp_rank, tp).slices()] = \
                shard
    return full


def wrong_parameters(engines, full, tp):
    """The engine parameters (of every TP rank's `engines`) that differ from the full
    tensors `full` fused the engine's way: "rank R name" each."""
    wrong = []
    for tp_rank, engine in enumerate(engines):
        expected = conventions.fuse_like_vllm(full, tp_rank, tp)
        for name, param in engine.items():
            if not torch.equal(param, expected[name]):
                wrong.append(f"rank {tp_rank} {name}")
    return wrong


def main():
    args = arguments(__doc__).parse_args()
    engines = [engine_parameters(r, args.tp) for r in range(args.tp)]
    held = sum(p.numel() * p.element_size() for e in engines for p in e.values())
    with refit.LocalDaemon(args.socket) as daemon:
        before = resident_bytes()
        for tp_rank, engine in enumerate(engines):
            tensors, boxes = conventions.vllm_views(engine, global_shapes(), tp_rank, args.tp)
            daemon.register_destination(tp_rank, tensors=tensors, boxes=boxes)
        grown = resident_bytes() - before
        print(f"inference: {held} bytes registered in place, resident memory grew by {grown} "
              f"bytes", flush=True)
        for version in range(args.first_version, args.first_version + args.steps):
            daemon.wait_for_version(version, timeout=60)
            wrong = wrong_parameters(engines, trainer_weights(args.out, version, args.tp),
                                     args.tp)
            if wrong:
                raise SystemExit(f"version {version}: wrong parameters: {', '.join(wrong)}")
            count = sum(len(e) for e in engines)
            print(f"version {version}: {count} engine parameters equal to the trainers' "
                  f"weights", flush=True)
            open(os.path.join(args.out, f"checked-{version}"), "w").close()


if __name__ == "__main__":
    main()
