"""One Megatron-style tensor-parallel trainer process of the dense model: it holds only its
own shards, registers them in place (no copy into refit's memory), and after every
optimizer step publishes the version; TP rank 0 also asks the coordinator for the refit.
Each version's shards are saved so the inference side can check them.

    dense_trainer.py --socket S --tp-rank R [--coordinator HOST:PORT] --out DIR
"""
import os

import torch

import refit
from dense import arguments, global_shapes, resident_bytes, shard_file, trainer_shards
from handoff import wait_for_file
from refit import conventions


def main():
    parser = arguments(__doc__)
    parser.add_argument("--tp-rank", type=int, required=True)
    parser.add_argument("--coordinator", default="", help="given to the rank that refits")
    args = parser.parse_args()

    params = trainer_shards(args.tp_rank, args.tp)
    optimizer = torch.optim.AdamW(params.values(), lr=1e-2)
    boxes = {name: conventions.megatron_box(name, shape, args.tp_rank, args.tp)
             for name, shape in global_shapes().items()}
    held = sum(p.numel() * p.element_size() for p in params.values())
    with refit.LocalDaemon(args.socket) as daemon:
        before = resident_bytes()
        daemon.register_source(args.tp_rank, tensors=params, boxes=boxes)
        grown = resident_bytes() - before
        print(f"trainer {args.tp_rank}: {held} bytes registered in place, resident memory "
              f"grew by {grown} bytes", flush=True)
        client = refit.RefitClient(args.coordinator) if args.coordinator else None
        for version in range(args.first_version, args.first_version + args.steps):
            if version > args.first_version:  # the engine is done reading the last version
                wait_for_file(os.path.join(args.out, f"checked-{version - 1}"), 60)
            # A step on this rank's shards alone (a stand-in for the TP forward/backward).
            for name, p in params.items():
                p.grad = torch.cos(p.detach() * version + len(name))
            optimizer.step()
            torch.save({n: p.detach().clone() for n, p in params.items()},
                       shard_file(args.out, version, args.tp_rank))
            daemon.publish(version)
            if client is not None:
                report = client.refit(version, timeout=60)
                print(f"version {version}: {report.bytes} bytes in {report.seconds:.3f} s",
                      flush=True)
        if client is not None:
            client.close()
        wait_for_file(os.path.join(args.out, f"checked-{version}"), 60)


if __name__ == "__main__":
    main()
