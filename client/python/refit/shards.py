"""Where one rank's piece of a tensor lies: a box (offset, extent) in the global tensor.

Boxes are plain data; `split`, `chunk` and `replicated` build the common ones, and
refit.placements builds them from a device mesh and Shard/Replicate placements."""
from dataclasses import dataclass
from typing import Tuple

from .errors import RefitInvalidInput


@dataclass(frozen=True)
class Box:
    """The box [offset, offset + extent) of a tensor of `global_shape`. An extent may be
    0 (the trailing ranks of a small tensor under torch.chunk): such a box holds nothing."""

    global_shape: Tuple[int, ...]
    offset: Tuple[int, ...]
    extent: Tuple[int, ...]

    def __post_init__(self):
        object.__setattr__(self, "global_shape", tuple(int(d) for d in self.global_shape))
        object.__setattr__(self, "offset", tuple(int(d) for d in self.offset))
        object.__setattr__(self, "extent", tuple(int(d) for d in self.extent))
        dims = len(self.global_shape)
        if len(self.offset) != dims or len(self.extent) != dims:
            raise RefitInvalidInput(
                       f"box of a {dims}-dim tensor needs {dims} offsets and extents, got "
                       f"{self.offset} and {self.extent}")
        for d in range(dims):
            if self.extent[d] < 0 or self.offset[d] < 0 or (
                    self.offset[d] + self.extent[d] > self.global_shape[d]):
                raise RefitInvalidInput(
                           f"box offset {self.offset} extent {self.extent} leaves the tensor of "
                           f"shape {self.global_shape} in dim {d}")

    @property
    def elements(self) -> int:
        count = 1
        for e in self.extent:
            count *= e
        return count

    @property
    def empty(self) -> bool:
        return self.elements == 0

    def slices(self) -> Tuple[slice, ...]:
        """Index of the box in the global tensor: `full[box.slices()]`."""
        return tuple(slice(o, o + e) for o, e in zip(self.offset, self.extent))

    def chunked(self, dim, index, parts) -> "Box":
        """Part `index` of this box when dimension `dim` is cut into `parts` as torch.chunk
        (and DTensor's Shard) cut it: chunks of ceil(extent / parts), the trailing ones
        shorter or empty."""
        step = -(-self.extent[dim] // parts)
        start = min(index * step, self.extent[dim])
        offset, extent = list(self.offset), list(self.extent)
        offset[dim] += start
        extent[dim] = min(step, self.extent[dim] - start)
        return Box(self.global_shape, offset, extent)


def replicated(global_shape) -> Box:
    """The whole tensor."""
    shape = tuple(global_shape)
    return Box(shape, (0,) * len(shape), shape)


def _check_part(shape, dim, index, parts):
    if not 0 <= dim < len(shape):
        raise RefitInvalidInput(f"dim {dim} of a {len(shape)}-dim tensor")
    if parts <= 0:
        raise RefitInvalidInput(f"{parts} parts: at least one")
    if not 0 <= index < parts:
        raise RefitInvalidInput(f"part {index} of {parts}")


def _along(shape, dim, start, length) -> Box:
    offset = [0] * len(shape)
    extent = list(shape)
    offset[dim] = start
    extent[dim] = length
    return Box(shape, offset, extent)


def split(global_shape, dim, index, parts) -> Box:
    """Part `index` of `parts` equal parts of dimension `dim` (which `parts` must divide)."""
    shape = tuple(global_shape)
    _check_part(shape, dim, index, parts)
    if shape[dim] % parts != 0:
        raise RefitInvalidInput(f"{parts} parts do not divide dim {dim} of size {shape[dim]} "
                                f"(refit.chunk splits unevenly, as torch.chunk)")
    step = shape[dim] // parts
    return _along(shape, dim, index * step, step)


def chunk(global_shape, dim, index, parts) -> Box:
    """Part `index` of dimension `dim` cut into `parts` as torch.chunk cuts it (uneven:
    the trailing parts may be shorter, or empty)."""
    shape = tuple(global_shape)
    _check_part(shape, dim, index, parts)
    return replicated(shape).chunked(dim, index, parts)
