"""Checkpoint tensors put together from the pieces a bucketed refit delivers: each tensor
is full-shaped (as vLLM's loaders index it) and complete once every element of the
worker's box of it has arrived."""
from typing import Dict, Optional

import torch


class TensorAssembly:
    """Checkpoint tensors arriving in pieces, each complete when its box is.

    Threading: used under the engine's lock."""

    def __init__(self, boxes, dtypes):
        self.boxes = boxes
        self.dtypes = dtypes
        self.partial: Dict[str, list] = {}  # name -> [full-shape tensor, elements in]
        self.partial_bytes = 0  # of the tensors begun and not complete (their boxes)
        self.peak_partial_bytes = 0

    def add(self, piece) -> Optional[torch.Tensor]:
        """Copies `piece` in; returns its tensor once every element of its box arrived."""
        entry = self.partial.get(piece.name)
        if entry is None:
            box = self.boxes[piece.name]
            # Full-shaped, as vLLM's loaders index it; only the box is written (a large
            # tensor's untouched pages are never backed by memory).
            entry = self.partial[piece.name] = [
                torch.empty(box.global_shape, dtype=self.dtypes[piece.name]), 0]
            self.partial_bytes += box.elements * entry[0].element_size()
            self.peak_partial_bytes = max(self.peak_partial_bytes, self.partial_bytes)
        region = tuple(slice(o, o + e) for o, e in zip(piece.box.offset, piece.box.extent))
        entry[0][region].copy_(piece.tensor)
        entry[1] += piece.box.elements
        if entry[1] < self.boxes[piece.name].elements:
            return None
        del self.partial[piece.name]
        self.partial_bytes -= entry[1] * entry[0].element_size()
        return entry[0]

    def clear(self):
        self.partial.clear()
        self.partial_bytes = self.peak_partial_bytes = 0
