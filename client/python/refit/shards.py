"""Where one rank's piece of a tensor lies: a box (offset, extent) in the global tensor.

Shards are plain data; `split` and `replicated` build the common ones (a slice of one
dimension in equal parts, or the whole tensor)."""
from dataclasses import dataclass
from typing import Tuple


@dataclass(frozen=True)
class Shard:
    """The box [offset, offset + extent) of a tensor of `global_shape`."""

    global_shape: Tuple[int, ...]
    offset: Tuple[int, ...]
    extent: Tuple[int, ...]

    def __post_init__(self):
        object.__setattr__(self, "global_shape", tuple(int(d) for d in self.global_shape))
        object.__setattr__(self, "offset", tuple(int(d) for d in self.offset))
        object.__setattr__(self, "extent", tuple(int(d) for d in self.extent))
        dims = len(self.global_shape)
        if len(self.offset) != dims or len(self.extent) != dims:
            raise ValueError(
                f"shard of a {dims}-dim tensor needs {dims} offsets and extents, got "
                f"{self.offset} and {self.extent}")
        for d in range(dims):
            if self.extent[d] <= 0 or self.offset[d] < 0 or (
                    self.offset[d] + self.extent[d] > self.global_shape[d]):
                raise ValueError(
                    f"shard offset {self.offset} extent {self.extent} leaves the tensor of "
                    f"shape {self.global_shape} in dim {d}")

    @property
    def elements(self):
        count = 1
        for e in self.extent:
            count *= e
        return count

    def slices(self):
        """Index of the shard in the global tensor: `full[shard.slices()]`."""
        return tuple(slice(o, o + e) for o, e in zip(self.offset, self.extent))


def replicated(global_shape):
    """The whole tensor."""
    shape = tuple(global_shape)
    return Shard(shape, (0,) * len(shape), shape)


def split(global_shape, dim, index, parts):
    """Part `index` of `parts` equal parts of dimension `dim` (which `parts` must divide)."""
    shape = tuple(global_shape)
    if not 0 <= dim < len(shape):
        raise ValueError(f"dim {dim} of a {len(shape)}-dim tensor")
    if parts <= 0 or shape[dim] % parts != 0:
        raise ValueError(f"{parts} parts do not divide dim {dim} of size {shape[dim]}")
    if not 0 <= index < parts:
        raise ValueError(f"part {index} of {parts}")
    step = shape[dim] // parts
    offset = [0] * len(shape)
    extent = list(shape)
    offset[dim] = index * step
    extent[dim] = step
    return Shard(shape, offset, extent)
