"""The CUDA IPC handle refitd opens a caching-allocator block by: what torch's
`_share_cuda_()` gives for a storage, reduced to the 64-byte cudaIpcMemHandle_t. Both ways
of registering CUDA memory (refit's own, refit.memory; the framework's, refit.in_place)
name their blocks through here."""
from .errors import RefitInvalidInput

CUDA_IPC_HANDLE_BYTES = 64  # sizeof(cudaIpcMemHandle_t)

# The version bytes of torch 2.x's shareable handles whose 'c' payload is the bare
# cudaIpcMemHandle_t (torch 2.13 moved from 2 to 3 without changing it).
_KNOWN_VERSIONS = (1, 2, 3)


def cuda_ipc_handle(what, shared_handle):
    """The cudaIpcMemHandle_t in what torch's `_share_cuda_()` gives for a storage;
    `what` names the memory in errors ("rank 0: tensor w").

    torch up to 1.x gives the 64-byte handle itself; torch 2.x gives its caching
    allocator's versioned form: a version byte, a type byte, then the payload, which for a
    block from cudaMalloc (type 'c') is the 64-byte handle. A block of an expandable
    segment (type 'e', PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) is memory
    refitd cannot open by a CUDA IPC handle, so it is refused, as are a version and a
    length refit does not know."""
    handle = bytes(shared_handle)
    if len(handle) == CUDA_IPC_HANDLE_BYTES:
        return handle
    if len(handle) >= 2 and handle[1:2] == b"e":
        raise RefitInvalidInput(
            f"{what}: its memory is an expandable segment of torch's CUDA caching allocator "
            f"(expandable_segments:True), which refit cannot open by a CUDA IPC handle; "
            f"allocate the weights with expandable_segments:False")
    if len(handle) == CUDA_IPC_HANDLE_BYTES + 2 and handle[1:2] == b"c":
        if handle[0] not in _KNOWN_VERSIONS:
            raise RefitInvalidInput(
                f"{what}: torch shares its CUDA memory as a handle of version {handle[0]}, "
                f"which refit does not know (it reads versions "
                f"{', '.join(map(str, _KNOWN_VERSIONS))})")
        return handle[2:]
    raise RefitInvalidInput(
        f"{what}: torch shares its CUDA memory as a {len(handle)}-byte handle that refit "
        f"does not know (a CUDA IPC handle has {CUDA_IPC_HANDLE_BYTES} bytes, torch 2.x's "
        f"form 2 more)")


def cuda_block_of(what, storage):
    """The caching-allocator block holding `storage`: its 64-byte CUDA IPC handle and the
    byte offset at which the storage starts in it. `what` names the memory in errors."""
    shared = storage._share_cuda_()
    return cuda_ipc_handle(what, shared[1]), shared[3]
