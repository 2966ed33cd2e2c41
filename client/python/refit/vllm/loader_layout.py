"""Which part of each checkpoint tensor a vLLM worker needs, read from vLLM's own loaders.

A worker's parameters are its tensor-parallel share of the checkpoint, fused and stacked
its model's way (`qkv_proj` from q, k and v; `gate_up_proj`; merged experts `w13`/`w2`;
replicated KV heads; a padded vocabulary). Rather than a table of those conventions, the
worker's own `model.load_weights` is run once per checkpoint tensor on the meta device (no
data, no memory, nothing written): every copy its loaders make is recorded, and the part
of the checkpoint tensor each copy reads is that worker's box of the tensor. A model family
vLLM loads is laid out with no refit code of its own.

A copy from a tensor the loader computed (a cast, a concatenation) rather than from a view
of the checkpoint tensor cannot be traced back to a part of it: that tensor is then needed
whole (correct, only larger).

    layout = loader_layout(model, specs)   # specs: name -> (shape, dtype) of the checkpoint
    layout.boxes, layout.dtypes, layout.skipped

Runs on the worker's thread, before any weight update (it opens and closes a layerwise
reload session of its own)."""
import logging
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Set, Tuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..errors import RefitInvalidInput
from ..shards import Box, replicated

logger = logging.getLogger(__name__)


def box_of_view(view: torch.Tensor, base_shape: Sequence[int]) -> Optional[Box]:
    """The box of a contiguous tensor of `base_shape` that `view` (a strided view of it:
    narrowed, sliced, selected, chunked, transposed) covers exactly; None when the view
    is not a box of it (a stepped slice, an expanded or reshaped view)."""
    base_shape = tuple(int(d) for d in base_shape)
    base_strides = []
    running = 1
    for d in reversed(base_shape):
        base_strides.append(running)
        running *= max(d, 1)
    base_strides.reverse()
    extent = [1] * len(base_shape)
    used = set()
    for size, stride in zip(view.shape, view.stride()):
        if size == 1:
            continue
        # The base dimension this one walks: the only one with its stride and room.
        dims = [d for d, s in enumerate(base_strides)
                if s == stride and d not in used and base_shape[d] > 1]
        if len(dims) != 1:
            return None
        used.add(dims[0])
        extent[dims[0]] = size
    offset = []
    remaining = view.storage_offset()
    for d, stride in enumerate(base_strides):
        offset.append(remaining // stride)
        remaining %= stride
    if any(o + e > g for o, e, g in zip(offset, extent, base_shape)):
        return None
    return Box(base_shape, tuple(offset), tuple(extent))


def bounding_box(boxes: Sequence[Box]) -> Box:
    """The smallest box holding every box of `boxes` (all of one tensor)."""
    first = boxes[0]
    low = list(first.offset)
    high = [o + e for o, e in zip(first.offset, first.extent)]
    for box in boxes[1:]:
        for d, (o, e) in enumerate(zip(box.offset, box.extent)):
            low[d] = min(low[d], o)
            high[d] = max(high[d], o + e)
    return Box(first.global_shape, tuple(low), tuple(h - l for l, h in zip(low, high)))


class _CopyRecorder(TorchDispatchMode):
    """Records, for each copy a loader makes, the part of the checkpoint tensor it reads
    and the dtype it writes."""

    def __init__(self, checkpoint_tensor: torch.Tensor):
        super().__init__()
        self.checkpoint_tensor = checkpoint_tensor
        self.reads: List[Optional[Box]] = []  # None: a copy from something computed
        self.written_dtypes: Set[torch.dtype] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.copy_.default:
            destination, source = args[0], args[1]
            self.written_dtypes.add(destination.dtype)
            if source is self.checkpoint_tensor or (
                    isinstance(source, torch.Tensor) and source._base is self.checkpoint_tensor):
                self.reads.append(box_of_view(source, self.checkpoint_tensor.shape))
            else:
                self.reads.append(None)
            if not destination.is_meta:
                # A tensor the layerwise session keeps live (a bias): the dry run only
                # records the copy, it never writes the model.
                return destination
        return func(*args, **(kwargs or {}))


@dataclass
class LoaderLayout:
    """What one worker needs of the checkpoint: `boxes[name]` (the part of checkpoint
    tensor `name` its loaders read), `dtypes[name]` (the dtype its parameters hold it in),
    `whole` (names needed whole because a loader copies from a computed tensor), `skipped`
    (checkpoint tensors the model loads nothing from: never declared), `params_of[name]`
    (the vLLM parameters each one fills) and `parameters` (the model's parameters in its
    checkpoint format, those the loaders fill)."""

    boxes: Dict[str, Box] = field(default_factory=dict)
    dtypes: Dict[str, torch.dtype] = field(default_factory=dict)
    whole: List[str] = field(default_factory=list)
    skipped: List[str] = field(default_factory=list)
    params_of: Dict[str, Set[str]] = field(default_factory=dict)
    parameters: List[str] = field(default_factory=list)

    def filled_parameters(self) -> Set[str]:
        """The vLLM parameters some checkpoint tensor fills."""
        return set().union(*self.params_of.values())


def _unwrap_layerwise_loaders(model: torch.nn.Module) -> None:
    """Puts each parameter's own loader back in place of the layerwise session's
    buffering wrapper, so that a dry run loads straight into the meta parameters."""
    from vllm.model_executor.model_loader.reload import layerwise
    from vllm.model_executor.model_loader.reload.utils import get_layer_tensors

    for layer in model.modules():
        for tensor in get_layer_tensors(layer).values():
            if hasattr(tensor, "weight_loader"):
                tensor.weight_loader = layerwise._get_original_loader(tensor)


def loader_layout(model: torch.nn.Module, model_config,
                  specs: Mapping[str, Tuple[Tuple[int, ...], torch.dtype]]) -> LoaderLayout:
    """Dry-runs `model.load_weights` for each checkpoint tensor of `specs` on the meta
    device and returns what this worker needs of each (see the module's docstring). The
    model's weights are untouched: its kernel tensors are put back at the end."""
    from vllm.model_executor.model_loader.reload import (finalize_layerwise_reload,
                                                         initialize_layerwise_reload)

    layout = LoaderLayout()
    reload_logger = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
    quiet = reload_logger.level
    initialize_layerwise_reload(model)  # parameters on meta, in the checkpoint's format
    try:
        _unwrap_layerwise_loaders(model)
        layout.parameters = [name for name, _ in model.named_parameters()]
        for name, (shape, dtype) in specs.items():
            checkpoint_tensor = torch.empty(shape, dtype=dtype, device="meta")
            recorder = _CopyRecorder(checkpoint_tensor)
            try:
                with torch.no_grad(), recorder:
                    filled = set(model.load_weights([(name, checkpoint_tensor)]) or ())
            except (RuntimeError, NotImplementedError, AssertionError) as error:
                raise RefitInvalidInput(f"refit's vLLM backend: vLLM's load_weights cannot lay "
                                        f"out checkpoint tensor {name} {tuple(shape)} {dtype} "
                                        f"on the meta device: {error}") from error
            if not recorder.reads:
                layout.skipped.append(name)  # not this model's, or another rank's expert
                continue
            layout.params_of[name] = filled
            reads = recorder.reads
            if any(r is None for r in reads):
                layout.whole.append(name)
                layout.boxes[name] = replicated(shape)
            else:
                layout.boxes[name] = bounding_box(reads)
            written = recorder.written_dtypes
            layout.dtypes[name] = written.pop() if len(written) == 1 else dtype
    finally:
        # Nothing was loaded through the session: every layer gets its kernel tensors
        # back (each says "Failed to load weights", which is the point here: hushed).
        reload_logger.setLevel(logging.ERROR)
        try:
            finalize_layerwise_reload(model, model_config)
        finally:
            reload_logger.setLevel(quiet)
    return layout


def check_every_parameter_filled(layout: LoaderLayout) -> None:
    """Refuses a layout that leaves a vLLM parameter unwritten, naming it."""
    parameter_names = layout.parameters
    filled = layout.filled_parameters()
    unfilled = [p for p in parameter_names if p not in filled]
    if unfilled:
        raise RefitInvalidInput(
            f"refit's vLLM backend: no checkpoint tensor fills vLLM parameter(s) "
            f"{', '.join(unfilled[:5])}{' ...' if len(unfilled) > 5 else ''} "
            f"({len(unfilled)} of {len(parameter_names)}): the model's load_weights maps none "
            f"of the checkpoint's tensors onto them, so a refit could not write them")
