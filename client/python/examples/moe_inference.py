"""The inference side of the example: one process holding inference ranks 0 and 1 of the
MoE model in a tensor-parallel layout, each rank's tensors the engine's own, registered in
place (refitd writes them; --allocated: refit's memory instead). For each version it
waits, then compares every shard with torch.equal against the trainer's full weights.

    moe_inference.py --socket S --out DIR [--steps N] [--staged] [--device cuda:0]
"""
import os

import torch

import refit
from moe import MoEModel, example_arguments, inference_placement, register


def main():
    parser = example_arguments(__doc__)
    parser.add_argument("--staged", action="store_true")
    args = parser.parse_args()

    shapes = MoEModel().state_dict()  # the shapes and dtypes; values arrive by refit
    with refit.LocalDaemon(args.socket) as daemon:
        ranks = []
        for r in range(args.ranks):
            placement = inference_placement(r, args.ranks)
            if args.allocated:
                ranks.append(register(daemon, "destination", r, shapes, placement, True,
                                      staged=args.staged))
                continue
            # What an engine holds on rank r: its own tensor for each shard, on the device.
            boxes = {name: box for name, (box, _) in
                     refit.torch_layout.shards_for(shapes, placement).items()}
            engine = {name: torch.zeros(box.extent, dtype=shapes[name].dtype,
                                        device=args.device) for name, box in boxes.items()}
            ranks.append(daemon.register_destination(r, tensors=engine, boxes=boxes,
                                                     staged=args.staged))
        print("inference ranks registered", flush=True)
        for version in range(args.first_version, args.first_version + args.steps):
            daemon.wait_for_version(version, timeout=60)
            full = torch.load(os.path.join(args.out, f"weights-{version}.pt"))
            wrong = []
            for rank in ranks:
                for name, tensor in rank.tensors.items():
                    expected = full[name][rank.shards[name].slices()]
                    if not torch.equal(tensor.cpu(), expected):
                        wrong.append(f"rank {rank.rank} {name}")
            if wrong:
                raise SystemExit(f"version {version}: wrong shards: {', '.join(wrong)}")
            tensors = sum(len(rank.tensors) for rank in ranks)
            print(f"version {version}: {tensors} shards equal to the trainer's weights",
                  flush=True)
            open(os.path.join(args.out, f"checked-{version}"), "w").close()


if __name__ == "__main__":
    main()
