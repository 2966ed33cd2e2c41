"""torch.distributed DTensors (FSDP2's `fully_shard` parameters, tensor-parallel modules)
as a rank's tensors: each DTensor's local shard, registered in place, and its box, read
from the DTensor's own mesh and placements (torch computes it, as DTensor does for
itself: uneven shards, strided shards of FSDP2 over tensor parallelism).

    locals, boxes = local_shards(dict(model.named_parameters()))

Without `boxes`, a plain tensor among them is the whole tensor (replicated on every rank);
with `boxes`, every plain tensor needs its box there. Partial placements (pending reductions) are refused: their local values
are not the tensor's."""
from typing import Any, Dict, Mapping, Optional, Tuple

from .errors import RefitInvalidInput
from .shards import Box, replicated


def _dtensor_class():
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch before 2.4: no public DTensor, and no such tensors
        return None
    return DTensor


def _box_of(name: str, tensor) -> Box:
    import torch

    try:
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    except ImportError as error:
        raise RefitInvalidInput(f"tensor {name} is a DTensor, but torch {torch.__version__} lacks "
                                f"torch.distributed.tensor._utils."
                                f"compute_local_shape_and_global_offset, which refit reads its "
                                f"box with (torch 2.4 to 2.13 have it)") from error
    for placement in tensor.placements:
        if placement.is_partial():
            raise RefitInvalidInput(f"tensor {name} is a DTensor with a Partial placement "
                                    f"({tensor.placements}): its local values are not the "
                                    f"tensor's until reduced; register it reduced")
    shape, offset = compute_local_shape_and_global_offset(
        tuple(tensor.shape), tensor.device_mesh, tensor.placements)
    local = tensor._local_tensor
    if tuple(local.shape) != tuple(shape):
        raise RefitInvalidInput(f"tensor {name}: its local shard is {tuple(local.shape)} but its "
                                f"placements {tensor.placements} give {tuple(shape)} (padded "
                                f"shards are not registered)")
    return Box(tuple(tensor.shape), tuple(offset), tuple(shape))


def local_shards(tensors: Mapping[str, Any], boxes: Optional[Mapping[str, Box]] = None
                 ) -> Tuple[Dict[str, Any], Dict[str, Box]]:
    """name -> this rank's local tensor (a DTensor's local shard: the same memory) and
    name -> its box (read from the DTensor; given in `boxes`; or, when no `boxes` are
    given, the whole tensor)."""
    dtensor = _dtensor_class()
    plain_tensors_whole = boxes is None
    boxes = dict(boxes or {})
    local_tensors = {}
    for name, tensor in tensors.items():
        if dtensor is not None and isinstance(tensor, dtensor):
            if name not in boxes:
                boxes[name] = _box_of(name, tensor)
            local_tensors[name] = tensor._local_tensor
            continue
        local_tensors[name] = tensor
        if plain_tensors_whole:
            boxes[name] = replicated(tensor.shape)
    return local_tensors, boxes
