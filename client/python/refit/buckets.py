"""The bucketed path, for a framework that cannot register its tensors (weights that move:
re-created after a sleep, offloaded, reallocated by the engine). The rank registers only
its boxes and dtypes and one bounded staging bucket; during an epoch refitd fills the
bucket with pieces of the rank's boxes and hands it over, and a callback copies each
piece in, wherever the weights are then. Peak extra memory is the bucket, not the model.

    def on_bucket(bucket):                    # refit.Bucket
        for piece in bucket.pieces:           # refit.BucketPiece
            weights()[piece.name][piece.local].copy_(piece.tensor)

    daemon.register_destination(rank, boxes=boxes, dtypes=dtypes,
                                bucket_bytes=64 << 20, on_bucket=on_bucket)

refit.copy_into(weights) builds that callback. A piece's tensor is a view of the bucket,
valid only during the callback; a callback that raises fails the epoch with its message
(the destination then holds a mix of versions, as an unstaged rank does)."""
import os
import secrets
import traceback
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any, Callable, List, Mapping, Tuple

import grpc

from ._proto import refit_pb2
from ._rank_stream import RankStream
from .errors import RefitError, RefitInvalidInput
from .shards import Box


@dataclass(frozen=True)
class BucketPiece:
    """One piece in a bucket: the box `box` of the global tensor `name`, as `tensor` (a
    view of the bucket, valid during the callback), and `local`, where the piece lies in
    the rank's shard (`shard[piece.local]` has the piece's shape)."""

    name: str
    box: Box
    local: Tuple[slice, ...]
    tensor: Any


@dataclass(frozen=True)
class Bucket:
    """What one hand-over holds: the epoch's version, its pieces, and whether it is the
    epoch's last bucket for this rank (`last`: every piece of the version has arrived)."""

    version: int
    epoch_id: str
    sequence: int
    last: bool
    pieces: List[BucketPiece]


def copy_into(weights: Callable[[], Mapping[str, Any]]) -> Callable[[Bucket], None]:
    """An on_bucket callback that copies each piece into `weights()[name]` (the rank's
    shard of that tensor, wherever it is when the bucket arrives; any device)."""

    def on_bucket(bucket: Bucket) -> None:
        current = weights()
        for piece in bucket.pieces:
            if piece.name not in current:
                raise RefitInvalidInput(f"bucket {bucket.sequence} of version {bucket.version} "
                                        f"holds a piece of {piece.name}, which the weights do "
                                        f"not have")
            current[piece.name][piece.local].copy_(piece.tensor)

    return on_bucket


class BucketMemory:
    """The registration of a bucketed rank: its views (boxes only, no memory) and its one
    buffer, a shared-memory staging bucket of `bucket_bytes` (mode 600, unlinked on
    close)."""

    def __init__(self, rank, boxes, dtypes, bucket_bytes):
        import torch

        if bucket_bytes < 256:  # refitd fills it in two halves of 64-byte-aligned parts
            raise RefitInvalidInput(f"rank {rank}: a bucket of {bucket_bytes} bytes is too small "
                                    f"(at least 256)")
        missing = sorted(set(boxes) ^ set(dtypes))
        if missing:
            raise RefitInvalidInput(f"rank {rank}: tensors {missing} need both a box and a dtype")
        self.rank = rank
        self.device = torch.device("cpu")
        self.boxes = dict(boxes)
        self.dtypes = dict(dtypes)
        self.tensors = {}  # nothing registered in place
        self.views = [refit_pb2.ShardView(tensor=name, offset=box.offset, extent=box.extent)
                      for name, box in self.boxes.items()]
        name = f"refit-bucket-{os.getpid()}-{secrets.token_hex(4)}-{rank}"
        self._shm = shared_memory.SharedMemory(name=name, create=True, size=int(bucket_bytes))
        self._flat = torch.frombuffer(self._shm.buf, dtype=torch.uint8, count=int(bucket_bytes))
        self.buffers = [refit_pb2.BufferSpec(name="bucket", bytes=int(bucket_bytes),
                                             shm_name="/" + self._shm.name.lstrip("/"))]

    def piece(self, message) -> BucketPiece:
        """The BucketPiece of a refit_pb2.BucketPiece, over the bucket's memory."""
        name = message.tensor
        if name not in self.boxes:
            raise RefitInvalidInput(f"rank {self.rank}: refitd sent a piece of {name}, which "
                                    f"this rank did not register")
        shard = self.boxes[name]
        box = Box(shard.global_shape, tuple(message.offset), tuple(message.extent))
        dtype = self.dtypes[name]
        size = box.elements * self._flat[:0].view(dtype).element_size()
        start = int(message.byte_offset)
        if start < 0 or start + size > self._flat.numel():
            raise RefitInvalidInput(f"rank {self.rank}: a piece of {name} at byte {start} leaves "
                                    f"the bucket of {self._flat.numel()} bytes")
        local = tuple(slice(o - so, o - so + e)
                      for o, so, e in zip(box.offset, shard.offset, box.extent))
        tensor = self._flat[start:start + size].view(dtype).view(box.extent)
        return BucketPiece(name, box, local, tensor)

    def close(self):
        self._flat = None
        if self._shm is not None:
            try:
                self._shm.close()
            except BufferError:
                pass  # a callback kept a piece: the mapping goes with it
            try:
                self._shm.unlink()
            except FileNotFoundError:
                pass  # refitd reclaimed it
            self._shm = None


class BucketReceiver(RankStream):
    """Holds the rank's ReceiveBuckets stream open on a thread: each bucket goes to
    `on_bucket`, then BucketDone says it was taken (or, when the callback raised, why
    not)."""

    def __init__(self, stub, session, memory, on_bucket):
        self._stub = stub
        self._session = session
        self._memory = memory
        self._on_bucket = on_bucket
        super().__init__(stub.ReceiveBuckets(refit_pb2.ReceiveBucketsRequest(session=session)),
                         memory.rank, "bucket stream")

    def _attaches(self, message):
        return message.sequence == 0

    def _take(self, message):
        error = ""
        try:
            pieces = [self._memory.piece(p) for p in message.pieces]
            self._on_bucket(Bucket(message.version, message.epoch_id, message.sequence,
                                   message.last, pieces))
        except Exception as e:  # the epoch fails with it; the stream stays open
            self.failure = e
            error = str(e) if isinstance(e, RefitError) else f"{type(e).__name__}: {e}"
            traceback.print_exc()
        try:
            self._stub.BucketDone(refit_pb2.BucketDoneRequest(
                session=self._session, epoch_id=message.epoch_id,
                sequence=message.sequence, error=error), timeout=30)
        except grpc.RpcError as e:
            # A bucket of an epoch that failed while it was copied in: refitd has moved on,
            # and the stream stays for the next epoch.
            if e.code() != grpc.StatusCode.FAILED_PRECONDITION:
                raise
