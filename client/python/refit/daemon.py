"""The node's refitd, as a trainer or inference process sees it: register the ranks this
process holds, publish a version (sources), wait for one (destinations)."""
import threading

import grpc

from ._channel import local_channel
from ._proto import refit_pb2, refit_pb2_grpc
from .errors import RefitError, from_rpc_error
from .memory import RankMemory, refit_dtype


class RegisteredRank:
    """One registered rank: its shards (`shards[name]`, refit.Shard), its memory
    (`tensors[name]`, torch tensors shaped like the shards) and its registration, which
    refitd keeps while this process lives."""

    def __init__(self, stub, role, rank, shards, memory, session):
        self.role = role
        self.rank = rank
        self.shards = shards
        self.memory = memory
        self.session = session
        self._stub = stub
        self._hold = stub.HoldRegistration(refit_pb2.HoldRegistrationRequest(session=session))
        self._held = threading.Event()
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def await_hold(self, timeout=10):
        """Returns once refitd confirmed it holds the registration for this process."""
        if not self._held.wait(timeout):
            raise RefitError(grpc.StatusCode.UNAVAILABLE,
                             f"rank {self.rank}: refitd did not confirm the registration hold")

    def _watch(self):
        try:
            for _ in self._hold:
                self._held.set()
        except grpc.RpcError:
            pass  # cancelled at close, or refitd went away
        finally:
            self._held.set()

    @property
    def tensors(self):
        return self.memory.tensors

    def load(self, full_tensors):
        """Copies each shard out of the full tensors (name -> torch tensor of the global
        shape): what a trainer does before it publishes."""
        for name, shard in self.shards.items():
            if name not in full_tensors:
                raise KeyError(f"rank {self.rank}: no tensor {name} to load its shard from")
            self.memory.tensors[name].copy_(full_tensors[name][shard.slices()])
        if self.memory.device.type == "cuda":
            import torch  # refitd reads the memory from its own CUDA context: finish first

            torch.cuda.synchronize(self.memory.device)

    def close(self):
        """Deregisters the rank (refitd ends the hold) and releases its memory."""
        try:
            self._stub.DeregisterRank(
                refit_pb2.DeregisterRankRequest(role=self.role, rank=self.rank), timeout=10)
        except grpc.RpcError as e:
            if e.code() not in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE):
                raise from_rpc_error(e) from None
        finally:
            self._hold.cancel()
            self._watcher.join(timeout=5)
            self.memory.close()


class LocalDaemon:
    """Talks to the refitd listening on the unix socket `socket`."""

    def __init__(self, socket="/run/refit/refitd.sock"):
        self._channel = local_channel(socket)
        self._stub = refit_pb2_grpc.LocalDaemonStub(self._channel)
        self._ranks = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Deregisters every rank registered here and releases its memory."""
        while self._ranks:
            self._ranks.pop().close()
        self._channel.close()

    def register_source(self, rank, shards, device=None, host="", timeout=60.0):
        """Registers trainer rank `rank` holding `shards` (name -> (refit.Shard, torch
        dtype)); returns the RegisteredRank whose tensors refitd reads."""
        return self._register(refit_pb2.ROLE_SOURCE, rank, shards, device, host, False, timeout)

    def register_destination(self, rank, shards, device=None, host="", staged=False,
                             timeout=60.0):
        """Registers inference rank `rank`; refitd writes its tensors. With `staged`, a
        failed epoch leaves them untouched (refitd writes a shadow, copied in at commit)."""
        return self._register(refit_pb2.ROLE_DESTINATION, rank, shards, device, host, staged,
                              timeout)

    def _register(self, role, rank, shards, device, host, staged, timeout):
        if not shards:
            raise ValueError(f"rank {rank}: no shards to register")
        memory = RankMemory(rank, shards, device)
        layout = refit_pb2.RankLayout(rank=int(rank), host=host, views=memory.views,
                                      buffers=[memory.buffer], staged=staged)
        if memory.device.type == "cuda":
            layout.device = memory.device_index
        tensors = [refit_pb2.TensorSpec(name=name, dtype=refit_dtype(dtype),
                                        shape=shard.global_shape)
                   for name, (shard, dtype) in shards.items()]
        request = refit_pb2.RegisterRankRequest(role=role, layout=layout, tensors=tensors)
        try:
            session = self._stub.RegisterRank(request, timeout=timeout).session
        except grpc.RpcError as e:
            memory.close()
            raise from_rpc_error(e) from None
        registered = RegisteredRank(self._stub, role, rank,
                                    {name: shard for name, (shard, _) in shards.items()},
                                    memory, session)
        try:
            registered.await_hold()
        except BaseException:
            try:  # take the registration back and free the memory before saying so
                registered.close()
            except RefitError:
                pass  # refitd is unreachable: the first error says more
            raise
        self._ranks.append(registered)
        return registered

    def publish(self, version, timeout=10.0):
        """Says every source rank registered here holds `version`, final."""
        for registered in self._ranks:
            if registered.role != refit_pb2.ROLE_SOURCE:
                continue
            try:
                self._stub.Publish(refit_pb2.PublishRequest(rank=registered.rank,
                                                            version=int(version)),
                                   timeout=timeout)
            except grpc.RpcError as e:
                raise from_rpc_error(e) from None

    def wait_for_version(self, version, timeout=60.0):
        """Returns once every destination rank registered here holds `version` (or a later
        one); returns the version they hold. RefitError with DEADLINE_EXCEEDED at the
        timeout, ABORTED when the epoch failed, saying what the buffers hold."""
        held = None
        for registered in self._ranks:
            if registered.role != refit_pb2.ROLE_DESTINATION:
                continue
            request = refit_pb2.WaitForVersionRequest(rank=registered.rank, version=int(version),
                                                      deadline_ms=int(timeout * 1000))
            try:
                got = self._stub.WaitForVersion(request, timeout=timeout + 5).version
            except grpc.RpcError as e:
                raise from_rpc_error(e) from None
            held = got if held is None else min(held, got)
        return held
