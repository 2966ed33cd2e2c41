"""Layouts in the vocabulary of torch.distributed's DTensor: a device mesh and, per tensor,
one placement per mesh dimension, `Shard(dim)` or `Replicate()`.

    mesh = refit.DeviceMesh((2, 4), ("dp", "tp"))         # 8 ranks, row-major
    box = mesh.box_of(rank, global_shape, [Replicate(), Shard(0)])

Sharding follows DTensor: the mesh dimensions apply in order, each cutting the part left
by the ones before it as torch.chunk does (uneven allowed; trailing parts may be empty).
Two mesh dimensions may shard one tensor dimension (FSDP2 over TP)."""
from dataclasses import dataclass
from typing import Sequence, Tuple

from .errors import RefitInvalidInput
from .shards import Box, replicated


@dataclass(frozen=True)
class Shard:
    """This mesh dimension cuts tensor dimension `dim`."""

    dim: int


@dataclass(frozen=True)
class Replicate:
    """Every rank along this mesh dimension holds the same part."""


class DeviceMesh:
    """Ranks laid out as an n-dimensional array, row-major (the last dimension varies
    fastest, as torch's DeviceMesh over torch.arange)."""

    def __init__(self, shape: Sequence[int], names: Sequence[str] = ()):
        self.shape: Tuple[int, ...] = tuple(int(s) for s in shape)
        if not self.shape or any(s <= 0 for s in self.shape):
            raise RefitInvalidInput(f"a device mesh of shape {self.shape}: every size must be "
                                    f"positive")
        self.names: Tuple[str, ...] = tuple(names)
        if self.names and len(self.names) != len(self.shape):
            raise RefitInvalidInput(f"{len(self.names)} names for a {len(self.shape)}-dim mesh")

    @property
    def size(self) -> int:
        total = 1
        for s in self.shape:
            total *= s
        return total

    def coordinate(self, rank: int) -> Tuple[int, ...]:
        """The rank's position in the mesh."""
        if not 0 <= rank < self.size:
            raise RefitInvalidInput(f"rank {rank} is not in a mesh of {self.size} ranks")
        coordinate = []
        for s in reversed(self.shape):
            coordinate.append(rank % s)
            rank //= s
        return tuple(reversed(coordinate))

    def box_of(self, rank: int, global_shape: Sequence[int], placements) -> Box:
        """The box of a tensor of `global_shape` that `rank` holds under `placements`
        (one Shard or Replicate per mesh dimension)."""
        shape = tuple(int(d) for d in global_shape)
        placements = tuple(placements)
        if len(placements) != len(self.shape):
            raise RefitInvalidInput(f"{len(placements)} placements for a {len(self.shape)}-dim "
                                    f"mesh {self.shape}: one per mesh dimension")
        box = replicated(shape)
        for mesh_dim, (placement, index) in enumerate(zip(placements, self.coordinate(rank))):
            if isinstance(placement, Replicate):
                continue
            if not isinstance(placement, Shard):
                raise RefitInvalidInput(f"placement {placement!r}: refit knows Shard(dim) and "
                                        f"Replicate()")
            dim = placement.dim + len(shape) if placement.dim < 0 else placement.dim
            if not 0 <= dim < len(shape):
                raise RefitInvalidInput(f"Shard({placement.dim}) of a {len(shape)}-dim tensor")
            box = box.chunked(dim, index, self.shape[mesh_dim])
        return box
