"""A rank's own tensors, registered where they are: refitd reads (sources) or writes
(destinations) the framework's parameters themselves, with no copy into refit's memory and
none out of it.

CPU tensors: each tensor's storage is moved, once, into a POSIX shared-memory segment by
torch itself (the `file_system` sharing of torch.multiprocessing, mode 600), in place:
the tensor, every view of its storage, a Parameter and an optimizer's reference to it keep
working and see the same memory, now one that refitd maps by name. A storage already
shared (torch's default `file_descriptor` sharing) is moved the same way.

CUDA tensors: each caching-allocator block is named by its CUDA IPC handle, once however
many tensors it holds; a tensor is a view at its offset inside the block.

Tensors that share a storage (fused parameters: vLLM's qkv_proj rows as the q, k and v
tensors of the model) become views of one buffer. Strided tensors are registered with
their strides."""
import ctypes
import os

from .cuda_ipc import cuda_block_of
from .errors import RefitInvalidInput
from .memory import refit_dtype
from ._proto import refit_pb2

# The torch versions whose private sharing calls the in-place path uses, checked by the
# client's tests: Debian's 1.13 and 2.13 (the vLLM test environment).
SUPPORTED_TORCH = "supported: torch 1.13 to 2.13"


def _storage_of(tensor):
    return tensor.untyped_storage() if hasattr(tensor, "untyped_storage") else \
        tensor.storage().untyped()


def _segment_header(name, shm_name, storage_bytes):
    """Where a storage's bytes start in its torch segment: torch's refcounted segments
    keep a 64-byte header (the reference count) before the data."""
    segment_bytes = os.stat("/dev/shm/" + shm_name.lstrip("/")).st_size
    header = segment_bytes - storage_bytes
    if header not in (0, 64):
        raise RefitInvalidInput(f"tensor {name}: torch {_torch_version()}'s shared segment "
                                f"{shm_name} holds {segment_bytes} bytes for a storage of "
                                f"{storage_bytes}: this torch lays its segments out in a way "
                                f"refit does not know ({SUPPORTED_TORCH})")
    return header


def _torch_version():
    import torch

    return torch.__version__


def _share_in_place(name, storage):
    """Moves a CPU storage into a named shared-memory segment, in place, through torch's
    private `_share_filename_cpu_` (a no-op when it is one already); the segment's name."""
    share = getattr(storage, "_share_filename_cpu_", None)
    if share is None:
        raise RefitInvalidInput(f"tensor {name}: torch {_torch_version()} cannot move a storage "
                                f"into shared memory in place (no _share_filename_cpu_): "
                                f"register it bucketed, or use a supported torch "
                                f"({SUPPORTED_TORCH})")
    _, shm_name, _ = share()
    return shm_name.decode() if isinstance(shm_name, bytes) else shm_name


def _return_freed_memory():
    """Gives the memory the moved storages held back to the system: glibc keeps freed
    heap memory for reuse, so without this the process would stay as large as if it held
    a copy of its weights."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: the allocator keeps it, to be reused


class InPlaceMemory:
    """The views and buffers of one rank over the process's own tensors. `tensors[name]`
    is the tensor itself; `boxes[name]` the box of the global tensor it holds."""

    def __init__(self, rank, tensors, boxes):
        self.rank = rank
        self.tensors = dict(tensors)
        self.boxes = {}
        self.views = []
        self.buffers = []
        self.dtypes = {}
        devices = {t.device for t in self.tensors.values()}
        if len(devices) != 1:
            raise RefitInvalidInput(f"rank {rank}: its tensors sit on {sorted(map(str, devices))}; "
                                    f"a rank's tensors share one device")
        self.device = devices.pop()
        if self.device.type not in ("cpu", "cuda"):
            raise RefitInvalidInput(f"rank {rank}: refit reads and writes CPU or CUDA tensors, not "
                                    f"{self.device}")
        self.device_index = self.device.index or 0
        buffer_of = {}  # storage or allocation key -> index into self.buffers
        for name, tensor in self.tensors.items():
            if name not in boxes:
                raise RefitInvalidInput(f"rank {rank}: tensor {name} has no box (where it lies in "
                                        f"the global tensor)")
            box = boxes[name]
            self.boxes[name] = box
            self.dtypes[name] = tensor.dtype
            refit_dtype(tensor.dtype)  # refused here when refit has no such dtype
            if tuple(tensor.shape) != box.extent:
                raise RefitInvalidInput(f"rank {rank}: tensor {name} has shape "
                                        f"{tuple(tensor.shape)} but its box {box.offset} + "
                                        f"{box.extent} of {box.global_shape} has another: register "
                                        f"the rank's local shard")
            if box.empty:
                continue  # holds nothing: declared, with no view
            if any(s == 0 for s in tensor.stride()):
                raise RefitInvalidInput(f"rank {rank}: tensor {name} is an expanded view (a "
                                        f"stride of 0 repeats its elements): register a tensor "
                                        f"that owns them")
            element = tensor.element_size()
            key, start = self._locate(name, tensor, buffer_of)
            buffer = self.buffers[buffer_of[key]]
            byte_offset = start + tensor.storage_offset() * element
            self.views.append(refit_pb2.ShardView(
                tensor=name, offset=box.offset, extent=box.extent, buffer=buffer.name,
                byte_offset=byte_offset, strides=list(tensor.stride())))
        if self.device.type == "cpu" and self.buffers:
            _return_freed_memory()  # what the storages held before they moved

    def _locate(self, name, tensor, buffer_of):
        """The buffer key of `tensor`'s memory and where its storage starts in it."""
        storage = _storage_of(tensor)
        if self.device.type == "cpu":
            key = storage.data_ptr()
            if key not in buffer_of:
                if storage.nbytes() == 0:
                    raise RefitInvalidInput(f"rank {self.rank}: tensor {name} has no memory")
                shm_name = _share_in_place(name, storage)
                key = storage.data_ptr()  # the segment's address now
                buffer_of[key] = len(self.buffers)
                self.buffers.append(refit_pb2.BufferSpec(
                    name=f"storage-{len(self.buffers)}",
                    bytes=_segment_header(name, shm_name, storage.nbytes()) + storage.nbytes(),
                    shm_name=shm_name))
            buffer = self.buffers[buffer_of[key]]
            return key, buffer.bytes - storage.nbytes()
        # CUDA: the caching allocator's block, named by its IPC handle, and the storage's
        # offset in it; a block holds many storages and is opened once.
        handle, block_offset = cuda_block_of(f"rank {self.rank}: tensor {name}", storage)
        end = block_offset + storage.nbytes()
        if handle not in buffer_of:
            buffer_of[handle] = len(self.buffers)
            self.buffers.append(refit_pb2.BufferSpec(
                name=f"block-{len(self.buffers)}", bytes=end, cuda_ipc_handle=handle))
        buffer = self.buffers[buffer_of[handle]]
        buffer.bytes = max(buffer.bytes, end)
        return handle, block_offset

    def close(self):
        """Forgets the tensors; they stay the framework's (nothing is freed or unlinked)."""
        self.tensors = {}
