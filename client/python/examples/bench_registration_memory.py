"""What registering a rank's weights costs the rank's process in resident memory: refit's
own memory (a copy of the weights, filled by load) against the process's tensors in place,
each measured in a fresh child process, side by side in one run. Only the process's side is
measured (refitd maps the memory in its own process; no refitd is needed here).

    PYTHONPATH=client/python:client/python/examples /usr/bin/python3 \\
        client/python/examples/bench_registration_memory.py [--megabytes 512]
"""
import argparse
import multiprocessing

import torch

import refit
from dense import resident_bytes
from refit.in_place import InPlaceMemory
from refit.memory import RankMemory


def weights(megabytes):
    """A trainer rank's shards: 8 MiB matrices, as many as make `megabytes`."""
    count = max(1, megabytes // 8)
    return {f"layers.{i}.weight": torch.randn(1024, 2048) for i in range(count)}


def measure(way, megabytes, results):
    params = weights(megabytes)
    boxes = {name: refit.replicated(tuple(t.shape)) for name, t in params.items()}
    before = resident_bytes()
    if way == "allocated":
        memory = RankMemory(0, {n: (b, torch.float32) for n, b in boxes.items()})
        for name, tensor in params.items():  # what RegisteredRank.load does each step
            memory.tensors[name].copy_(tensor)
    else:
        memory = InPlaceMemory(0, params, boxes)
    results[way] = resident_bytes() - before
    memory.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--megabytes", type=int, default=512)
    args = parser.parse_args()
    held = max(1, args.megabytes // 8) * 1024 * 2048 * 4  # what weights() makes
    with multiprocessing.Manager() as manager:
        results = manager.dict()
        for way in ("allocated", "in_place"):
            child = multiprocessing.get_context("spawn").Process(
                target=measure, args=(way, args.megabytes, results))
            child.start()
            child.join()
        mb = 2 ** 20
        print(f"{'weights_MB':>10} {'allocated_MB':>12} {'in_place_MB':>11} {'in_place/weights':>16}")
        print(f"{held / mb:10.1f} {results['allocated'] / mb:12.1f} {results['in_place'] / mb:11.1f}"
              f" {results['in_place'] / held:16.3f}")


if __name__ == "__main__":
    main()
