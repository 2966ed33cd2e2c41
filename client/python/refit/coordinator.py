"""The coordinator's client: trigger a refit, watch an epoch, read the cluster's status."""
from typing import Iterator

import grpc

from ._channel import coordinator_channel, token_metadata
from ._proto import refit_pb2, refit_pb2_grpc
from .errors import RefitError, from_rpc_error


class RefitClient:
    """Talks to the coordinator at `address` ("host:port")."""

    def __init__(self, address: str):
        self._address = address
        self._channel = coordinator_channel(address)
        self._stub = refit_pb2_grpc.CoordinatorStub(self._channel)
        self._metadata = token_metadata()

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def refit(self, version: int, timeout: float = 60.0) -> "refit_pb2.RefitReport":
        """Moves `version` from the trainers to the inference ranks; returns the report
        (refit_pb2.RefitReport) once every destination holds it. A repeat of a committed
        version returns its report; one in flight joins it. RefitError otherwise, naming
        the ranks, daemons and cause."""
        request = refit_pb2.RefitRequest(version=int(version), deadline_ms=int(timeout * 1000))
        try:
            return self._stub.Refit(request, timeout=timeout + 5, metadata=self._metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def status(self, timeout: float = 10.0) -> "refit_pb2.StatusResponse":
        """refit_pb2.StatusResponse: daemons, current version, plan digest, last epochs."""
        try:
            return self._stub.Status(refit_pb2.StatusRequest(), timeout=timeout,
                                     metadata=self._metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def watch(self, epoch: str = "", timeout: float = 60.0,
              version: int = 0) -> Iterator["refit_pb2.EpochProgress"]:
        """Yields refit_pb2.EpochProgress of `epoch` (default: the running one, or the next
        to start; with `version`, the epoch that moves it, even one that already ended)
        until it commits or aborts."""
        request = refit_pb2.WatchEpochRequest(epoch_id=epoch, timeout_ms=int(timeout * 1000),
                                              version=int(version))
        try:
            for progress in self._stub.WatchEpoch(request, timeout=timeout + 5,
                                                  metadata=self._metadata):
                yield progress
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None


__all__ = ["RefitClient", "RefitError"]
