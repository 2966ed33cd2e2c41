"""Shards for a module's tensors: a placement function says which box of each tensor a
rank holds, and `shards_for` turns a state dict into what LocalDaemon registers."""


def shards_for(tensors, placement):
    """`tensors`: name -> torch tensor of the global shape (a state dict). `placement`:
    (name, global shape) -> refit.Shard, or None where the rank holds none of it.
    Returns name -> (Shard, dtype) for the tensors the rank holds."""
    shards = {}
    for name, tensor in tensors.items():
        shard = placement(name, tuple(tensor.shape))
        if shard is not None:
            shards[name] = (shard, tensor.dtype)
    return shards
