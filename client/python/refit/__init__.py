"""refit's Python client.

    RefitClient(coordinator).refit(version, timeout)   # orchestration: move a version
    LocalDaemon(socket).register_source(rank, shards)  # trainer ranks
    LocalDaemon(socket).register_destination(rank, shards)
    daemon.publish(version); daemon.wait_for_version(version, timeout)

Shards say where each rank's piece of a tensor lies (refit.Shard, refit.split,
refit.replicated); refit.torch_layout builds them for a module's parameters.
"""
from .coordinator import RefitClient
from .daemon import LocalDaemon, RegisteredRank
from .errors import RefitError
from .memory import refit_dtype
from .shards import Shard, replicated, split
from . import torch_layout

__all__ = ["LocalDaemon", "RefitClient", "RefitError", "RegisteredRank", "Shard",
           "refit_dtype", "replicated", "split"]
