"""refit's Python client.

    RefitClient(coordinator).refit(version, timeout)   # orchestration: move a version
    LocalDaemon(socket).register_source(rank, tensors=..., boxes=...)   # trainer ranks
    LocalDaemon(socket).register_destination(rank, tensors=..., boxes=...)
    daemon.publish(version); daemon.wait_for_version(version, timeout)
    LocalDaemon(socket).register_destination(rank, tensors=..., boxes=...,
                                             quantized={name: refit.BlockFp8(scale_name)})
    LocalDaemon(socket).register_destination(rank, boxes=..., dtypes=..., bucket_bytes=...,
                                             on_bucket=refit.copy_into(weights))  # bucketed
    gate = refit.WriteGate()   # the engine pauses while refit writes (refit.write_hooks)
    daemon.register_destination(rank, tensors=..., boxes=..., hooks=gate.hooks)
    with gate: engine.step()

A rank registers its own tensors in place (refitd reads or writes them where they are),
each with the box of the global tensor it holds (refit.Box). Boxes come from a device mesh
and DTensor-style placements (refit.DeviceMesh, refit.Shard, refit.Replicate), from
refit.chunk / refit.split / refit.replicated, or from refit.conventions (Megatron and vLLM).
"""
from .buckets import Bucket, BucketPiece, copy_into
from .coordinator import RefitClient
from .daemon import LocalDaemon, RegisteredRank
from .errors import (RefitAborted, RefitDataLoss, RefitError, RefitInvalidInput,
                     RefitPermissionDenied, RefitRejected, RefitTimeout, RefitUnavailable)
from .memory import refit_dtype
from .placements import DeviceMesh, Replicate, Shard
from .quantization import BlockFp8, CastToBf16, DequantizeFp8
from .shards import Box, chunk, replicated, split
from .write_hooks import WriteGate, WriteHooks
from . import torch_layout

__all__ = ["BlockFp8", "Box", "Bucket", "BucketPiece", "CastToBf16", "DequantizeFp8",
           "DeviceMesh", "LocalDaemon", "RefitAborted", "RefitClient", "RefitDataLoss",
           "RefitError", "RefitInvalidInput", "RefitPermissionDenied", "RefitRejected",
           "RefitTimeout", "RefitUnavailable", "RegisteredRank", "Replicate", "Shard", "chunk",
           "copy_into", "refit_dtype", "replicated", "split", "WriteGate", "WriteHooks"]
