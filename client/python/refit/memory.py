"""Memory that refitd can reach, with torch tensors over it: POSIX shared memory for CPU
tensors (one segment per rank, mode 600, unlinked on close) or one CUDA allocation per
rank, registered by its CUDA IPC handle."""
import os
import secrets
from multiprocessing import shared_memory

from .cuda_ipc import cuda_block_of
from .errors import RefitInvalidInput
from ._proto import refit_pb2

_ALIGN = 256  # every view starts on a 256-byte boundary

_DTYPES = {  # torch dtype name -> refit dtype
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
    "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL",
}


def refit_dtype(dtype):
    """refit's name of a torch dtype (torch.float32 -> "F32")."""
    name = str(dtype).replace("torch.", "")
    if name not in _DTYPES:
        raise RefitInvalidInput(f"dtype {dtype} has no refit equivalent (supported: "
                                f"{', '.join(sorted(_DTYPES))})")
    return _DTYPES[name]


def _aligned(n):
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


class RankMemory:
    """The views of one rank, packed into one buffer. `tensors[name]` is the torch tensor
    (shaped like the shard) that refitd reads (sources) or writes (destinations)."""

    def __init__(self, rank, shards, device=None):
        import torch  # only the memory needs torch

        self.rank = rank
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self._shm = None
        self._flat = None
        self._base_offset = 0  # where the buffer's memory starts within what it names
        offsets, total = {}, 0
        for name, (shard, dtype) in shards.items():
            offsets[name] = total
            total += _aligned(shard.elements * torch.tensor([], dtype=dtype).element_size())
        total = max(total, _ALIGN)
        self.bytes = total
        if self.device.type == "cpu":
            shm_name = f"refit-py-{os.getpid()}-{secrets.token_hex(4)}-{rank}"
            self._shm = shared_memory.SharedMemory(name=shm_name, create=True, size=total)
            self._flat = torch.frombuffer(self._shm.buf, dtype=torch.uint8, count=total)
            self.buffer = refit_pb2.BufferSpec(name="rank", bytes=total,
                                               shm_name="/" + self._shm.name.lstrip("/"))
        elif self.device.type == "cuda":
            self._flat = torch.empty(total, dtype=torch.uint8, device=self.device)
            self.buffer, self._base_offset = _cuda_ipc_buffer(rank, self._flat, total)
            self.device_index = self.device.index if self.device.index is not None else 0
        else:
            raise RefitInvalidInput(f"rank {rank}: refit holds CPU or CUDA tensors, not "
                                    f"{self.device}")
        self.boxes = {name: shard for name, (shard, _) in shards.items()}
        self.dtypes = {name: dtype for name, (_, dtype) in shards.items()}
        self.tensors = {}
        self.views = []
        for name, (shard, dtype) in shards.items():
            size = shard.elements * torch.tensor([], dtype=dtype).element_size()
            start = offsets[name]
            self.tensors[name] = self._flat[start:start + size].view(dtype).view(shard.extent)
            self.views.append(refit_pb2.ShardView(
                tensor=name, offset=shard.offset, extent=shard.extent, buffer="rank",
                byte_offset=self._base_offset + start))

    @property
    def buffers(self):
        """The rank's buffers (its one buffer), as InPlaceMemory names them."""
        return [self.buffer]

    def close(self):
        """Drops the tensors and releases the memory (the segment's name goes too)."""
        self.tensors = {}
        self._flat = None
        if self._shm is not None:
            try:
                self._shm.close()
            except BufferError:
                pass  # a caller still holds a tensor: the mapping goes with it
            try:
                self._shm.unlink()
            except FileNotFoundError:
                pass  # refitd reclaimed it
            self._shm = None


def _cuda_ipc_buffer(rank, flat, total):
    """The BufferSpec of a CUDA tensor's memory: torch's caching allocator hands out
    pieces of larger blocks, and a CUDA IPC handle names the whole block, so the buffer
    is the block up to the end of this tensor and views are offset by where it starts.
    Returns the BufferSpec and that offset."""
    storage = flat.untyped_storage() if hasattr(flat, "untyped_storage") else flat.storage()
    handle, offset_bytes = cuda_block_of(f"rank {rank}: the memory refit allocated", storage)
    spec = refit_pb2.BufferSpec(name="rank", bytes=offset_bytes + total, cuda_ipc_handle=handle)
    return spec, offset_bytes
