#!/usr/bin/env python3
"""The refits a user would write with torch.distributed, as baselines for refit's live refit.

Every rank of both layouts is a process (gloo over loopback, as trainer and inference
processes of one machine would talk); each holds its views of the layouts refitctl writes
(`refitctl plan ... --layouts-out PREFIX`) as torch tensors of the same element size. Per
round, the sources write that round's values, the transfer is timed (barrier to barrier,
the slowest rank's time), and then every destination view is checked element by element.

Strategies:
  gather_broadcast  the conventional refit: per tensor, its source shards are gathered onto
                    one trainer rank, which broadcasts the full tensor to every inference
                    rank; each keeps its slice (receive buffers reused across tensors and
                    rounds).
  p2p               only the overlapping pieces, directly: each destination box is cut
                    into the source boxes it overlaps (replicated sources taken in turn),
                    and each (source, destination) pair exchanges one message holding all
                    of its pieces, each at a multiple of 8 bytes (buffers kept across
                    rounds).

  torch_refit_baselines.py --layouts PREFIX --strategy p2p --rounds 4
prints one line per round: "torch p2p round R: S s, B GB delivered, G GB/s, W wrong".
"""
import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

DTYPE_BY_BYTES = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
ELEMENT_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "F8_E4M3": 1, "F8_E5M2": 1,
                 "I8": 1, "U8": 1, "I16": 2, "I32": 4, "I64": 8, "BOOL": 1}


class View:
    """One rank's box of one tensor: global offset and extent, and the tensor's index."""

    def __init__(self, tensor_index, offset, extent):
        self.tensor = tensor_index
        self.offset = [int(x) for x in offset]
        self.extent = [int(x) for x in extent]

    def key(self):
        return (self.tensor, tuple(self.offset), tuple(self.extent))

    def elements(self):
        count = 1
        for e in self.extent:
            count *= e
        return count


def load_layouts(prefix):
    source = json.load(open(prefix + ".src.json"))
    destination = json.load(open(prefix + ".dst.json"))
    tensors = source["tensors"]
    index = {t["name"]: i for i, t in enumerate(tensors)}
    shapes = [[int(x) for x in t.get("shape", [])] for t in tensors]
    element_bytes = [ELEMENT_BYTES[t["dtype"]] for t in tensors]

    def ranks(layout):
        return [[View(index[v["tensor"]], v.get("offset", []), v.get("extent", []))
                 for v in rank.get("views", [])] for rank in layout["ranks"]]

    return shapes, element_bytes, ranks(source), ranks(destination)


def intersect(a_offset, a_extent, b_offset, b_extent):
    """The global box two boxes share, or None."""
    offset, extent = [], []
    for ao, ae, bo, be in zip(a_offset, a_extent, b_offset, b_extent):
        lo, hi = max(ao, bo), min(ao + ae, bo + be)
        if hi <= lo:
            return None
        offset.append(lo)
        extent.append(hi - lo)
    return offset, extent


def local_slices(view, offset, extent):
    """Slices of `view`'s tensor that hold the global box (offset, extent)."""
    return tuple(slice(o - vo, o - vo + e) for o, e, vo in zip(offset, extent, view.offset))


class ExpectedValues:
    """The values of a box in a round, a function of (tensor, global index, round), computed
    into buffers kept across views and rounds (fresh temporaries per view would fault in
    gigabytes of pages every round)."""

    def __init__(self, largest_box):
        self.index = torch.empty(largest_box, dtype=torch.int32)
        self.values = {dtype: torch.empty(largest_box, dtype=dtype)
                       for dtype in set(DTYPE_BY_BYTES.values())}
        self.unequal = torch.empty(largest_box, dtype=torch.bool)

    def of(self, tensor, shape, offset, extent, round_number, dtype):
        count = _count(extent)
        index = self.index[:count].view(extent)
        index.zero_()
        stride = 1
        for dim in reversed(range(len(shape))):
            coordinates = torch.arange(offset[dim], offset[dim] + extent[dim], dtype=torch.int32)
            view_shape = [1] * len(shape)
            view_shape[dim] = extent[dim]
            index.add_(coordinates.view(view_shape) * stride)
            stride *= shape[dim]
        index.mul_(40503).add_(tensor * 7919 + round_number * 104729).remainder_(251)
        values = self.values[dtype][:count].view(extent)
        values.copy_(index)
        return values

    def count_unequal(self, held, expected):
        unequal = self.unequal[:held.numel()].view(held.shape)
        torch.ne(held, expected, out=unequal)
        return int(unequal.sum())


class Rank:
    """What one process holds: its views as tensors, by layout side."""

    def __init__(self, rank, shapes, element_bytes, sources, destinations):
        self.rank = rank
        self.shapes = shapes
        self.element_bytes = element_bytes
        self.source_count = len(sources)
        self.is_source = rank < len(sources)
        index = rank if self.is_source else rank - len(sources)
        self.views = sources[index] if self.is_source else destinations[index]
        self.tensors = [torch.zeros(v.extent if v.extent else (), dtype=self.dtype(v))
                        for v in self.views]
        self.sources = sources
        self.destinations = destinations
        self.expected = ExpectedValues(max([v.elements() for v in self.views] + [1]))

    def dtype(self, view):
        return DTYPE_BY_BYTES[self.element_bytes[view.tensor]]

    def fill(self, round_number):
        for view, held in zip(self.views, self.tensors):
            held.copy_(self.expected.of(view.tensor, self.shapes[view.tensor], view.offset,
                                        view.extent, round_number, held.dtype))

    def wrong_elements(self, round_number):
        wrong = 0
        for view, held in zip(self.views, self.tensors):
            expected = self.expected.of(view.tensor, self.shapes[view.tensor], view.offset,
                                        view.extent, round_number, held.dtype)
            wrong += self.expected.count_unequal(held, expected)
        return wrong

    def delivered_bytes(self):
        return sum(v.elements() * self.element_bytes[v.tensor]
                   for rank in self.destinations for v in rank)


class GatherBroadcast:
    """Per tensor: gather the distinct source boxes onto the first source rank holding the
    tensor, then broadcast the full tensor from it to every destination rank."""

    def __init__(self, held):
        self.held = held
        destination_ranks = list(range(held.source_count,
                                       held.source_count + len(held.destinations)))
        self.groups = {}
        for owner in range(held.source_count):  # every process creates every group, in order
            self.groups[owner] = dist.new_group([owner] + destination_ranks)
        self.steps = []  # (tensor, owner, [(holder, source View)])
        boxes_by_tensor = {}  # tensor -> {distinct source box: (first holder, View)}
        for source_rank, views in enumerate(held.sources):
            for v in views:
                boxes_by_tensor.setdefault(v.tensor, {}).setdefault(v.key(), (source_rank, v))
        for tensor in sorted(boxes_by_tensor):
            holders = list(boxes_by_tensor[tensor].values())
            self.steps.append((tensor, min(r for r, _ in holders), holders))
        # One byte buffer for the full tensor and one for a received shard, reused for every
        # tensor and round (gloo moves bytes of any element type).
        largest = max(self.full_elements(t) * held.element_bytes[t] for t, _, _ in self.steps)
        self.buffer = torch.empty(largest, dtype=torch.uint8)
        self.received = torch.empty(largest, dtype=torch.uint8)
        self.mine = {}
        for view, tensor in zip(held.views, held.tensors):
            self.mine.setdefault(view.tensor, []).append((view, tensor))

    def full_elements(self, tensor):
        count = 1
        for e in self.held.shapes[tensor]:
            count *= e
        return count

    def run(self):
        held = self.held
        for tensor, owner, holders in self.steps:
            shape = held.shapes[tensor]
            dtype = DTYPE_BY_BYTES[held.element_bytes[tensor]]
            participates = held.rank == owner or not held.is_source
            full_bytes = self.buffer[:self.full_elements(tensor) * held.element_bytes[tensor]]
            full = full_bytes.view(dtype).view(shape)
            whole = View(tensor, [0] * len(shape), shape)
            for holder, box in holders:
                if holder == owner and held.rank == owner:
                    full[local_slices(whole, box.offset, box.extent)] = self.held_tensor(box)
                elif held.rank == owner:
                    received = self.received[:box.elements() * held.element_bytes[tensor]]
                    dist.recv(received, src=holder)
                    full[local_slices(whole, box.offset, box.extent)] = received.view(
                        dtype).view(box.extent)
                elif held.rank == holder:
                    dist.send(self.held_tensor(box).contiguous().view(-1).view(torch.uint8),
                              dst=owner)
            if not participates:
                continue
            dist.broadcast(full_bytes, src=owner, group=self.groups[owner])
            if not held.is_source:
                for view, mine in self.mine.get(tensor, []):
                    mine.copy_(full[local_slices(whole, view.offset, view.extent)])

    def held_tensor(self, box):
        for view, tensor in self.mine[box.tensor]:
            if view.key() == box.key():
                return tensor
        raise KeyError(box.key())


class PointToPoint:
    """Each (source, destination) pair exchanges one message holding all of its pieces."""

    def __init__(self, held):
        self.held = held
        pieces = {}  # (source rank, destination rank) -> [(source View, destination View, box)]
        by_tensor = {}  # tensor -> {distinct source box: [(source rank, View)]}
        for source_rank, source_views in enumerate(held.sources):
            for sv in source_views:
                by_tensor.setdefault(sv.tensor, {}).setdefault(sv.key(), []).append(
                    (source_rank, sv))
        for d, views in enumerate(held.destinations):
            destination_rank = held.source_count + d
            for dv in views:
                for holders in by_tensor.get(dv.tensor, {}).values():
                    source_rank, sv = holders[d % len(holders)]
                    box = intersect(sv.offset, sv.extent, dv.offset, dv.extent)
                    if box is not None:
                        pieces.setdefault((source_rank, destination_rank), []).append(
                            (sv, dv, box))
        self.outgoing, self.incoming = [], []
        for (s, d), list_of_pieces in sorted(pieces.items()):
            if held.rank not in (s, d):
                continue
            message_bytes = sum(_aligned(_count(box[1]) * held.element_bytes[sv.tensor])
                                for sv, _, box in list_of_pieces)
            message = torch.empty(message_bytes, dtype=torch.uint8)
            (self.outgoing if held.rank == s else self.incoming).append(
                (d if held.rank == s else s, list_of_pieces, message))
        self.by_key = {v.key(): t for v, t in zip(held.views, held.tensors)}

    def run(self):
        requests = []
        for peer, list_of_pieces, message in self.incoming:
            requests.append(dist.irecv(message, src=peer))
        for peer, list_of_pieces, message in self.outgoing:
            at = 0
            for sv, _, (offset, extent) in list_of_pieces:
                part = self.by_key[sv.key()][local_slices(sv, offset, extent)]
                size = part.numel() * part.element_size()
                message[at:at + size].view(part.dtype).view(part.shape).copy_(part)
                at += _aligned(size)
            requests.append(dist.isend(message, dst=peer))
        incoming = list(self.incoming)
        for request in requests[:len(incoming)]:
            request.wait()
        for peer, list_of_pieces, message in incoming:
            at = 0
            for _, dv, (offset, extent) in list_of_pieces:
                target = self.by_key[dv.key()][local_slices(dv, offset, extent)]
                size = target.numel() * target.element_size()
                target.copy_(message[at:at + size].view(target.dtype).view(target.shape))
                at += _aligned(size)
        for request in requests[len(incoming):]:
            request.wait()


def _aligned(size):
    """`size` rounded up to 8 bytes: where the next piece of a message starts."""
    return (size + 7) // 8 * 8


def _count(extent):
    count = 1
    for e in extent:
        count *= e
    return count


def run_rank(rank, world, port, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    shapes, element_bytes, sources, destinations = load_layouts(args.layouts)
    held = Rank(rank, shapes, element_bytes, sources, destinations)
    strategy = (GatherBroadcast if args.strategy == "gather_broadcast" else PointToPoint)(held)
    for round_number in range(1, args.rounds + 1):
        if held.is_source:
            held.fill(round_number)
        dist.barrier()
        start = time.perf_counter()
        strategy.run()
        dist.barrier()
        elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        wrong = torch.tensor([0 if held.is_source else held.wrong_elements(round_number)],
                             dtype=torch.int64)
        dist.all_reduce(wrong)
        if rank == 0:
            seconds = float(elapsed[0])
            gigabytes = held.delivered_bytes() / 1e9
            print(f"torch {args.strategy} round {round_number}: {seconds:.3f} s, "
                  f"{gigabytes:.2f} GB delivered, {gigabytes / seconds:.2f} GB/s, "
                  f"{int(wrong[0])} wrong", flush=True)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layouts", required=True,
                        help="PREFIX of PREFIX.src.json and PREFIX.dst.json (refitctl plan "
                             "--layouts-out)")
    parser.add_argument("--strategy", choices=["gather_broadcast", "p2p"], required=True)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    _, _, sources, destinations = load_layouts(args.layouts)
    world = len(sources) + len(destinations)
    mp.spawn(run_rank, args=(world, free_port(), args), nprocs=world, join=True)


if __name__ == "__main__":
    sys.exit(main())
