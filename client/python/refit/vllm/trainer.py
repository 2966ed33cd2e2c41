"""refit as vLLM's trainer-side weight-transfer engine (vLLM 0.32's
`TrainerWeightTransferEngine`), so a trainer written against vLLM's API switches to refit
by name:

    from vllm.distributed.weight_transfer import WeightTransferTrainerFactory
    from vllm.distributed.weight_transfer.clients import HTTPVLLMWeightSyncClient
    refit.vllm.register()        # or vllm.plugins.load_general_plugins()
    engine = WeightTransferTrainerFactory.trainer_init(
        RefitTrainerInitInfo(rank=rank, socket="/run/refit/refitd.sock",
                             coordinator="coordinator:50051",
                             engine_socket="/run/refit/refitd.sock",
                             parameters=dict(model.named_parameters())),
        client=HTTPVLLMWeightSyncClient("http://engine:8000"))
    ...
    optimizer.step(); engine.send_weights()       # on every trainer rank

Unlike vLLM's full-resync engines, no `WeightSource` is iterated and nothing is gathered:
each rank's parameters (DTensors or plain tensors) are registered in place once, with the
node's refitd, as refit source rank `rank`; `send_weights` publishes the next version on
every rank, and on rank 0 (the sender) drives the engine's round trip (start_weight_update,
update_weights while the coordinator moves the version, finish_weight_update). It returns
on every rank once the version is committed (a barrier over `group`, default torch's
default group when one exists), so no rank changes its parameters while refit reads them.

Pause the engine around it as with any backend (`/pause?mode=wait` .. `/resume`, which also
clears the prefix cache), or reset its prefix cache after it.

Threading: one training thread calls it."""
import threading
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Optional

import grpc
from vllm.distributed.weight_transfer.base import TrainerInitInfo, TrainerWeightTransferEngine

import refit

from ..errors import RefitAborted, RefitInvalidInput


def refit_engine(client, coordinator, version: int, timeout: float):
    """One refit of `version` into the engine behind `client` (a `VLLMWeightSyncClient`):
    start_weight_update, update_weights while `coordinator` (refit.RefitClient) moves the
    version, finish_weight_update. Returns the coordinator's RefitReport; RefitAborted
    when the engine's update failed (its workers closed that update: start again)."""
    client.start_weight_update()
    failure = []

    def update():
        try:
            client.update_weights({"version": version, "timeout": timeout})
        except BaseException as error:  # reported on the calling thread
            failure.append(error)

    receiver = threading.Thread(target=update, name=f"refit-update-{version}")
    receiver.start()
    try:
        report = coordinator.refit(version, timeout=timeout)
    finally:
        receiver.join()
    if failure:
        raise RefitAborted(grpc.StatusCode.ABORTED,
                           f"refit: the engine's update_weights for version {version} failed: "
                           f"{failure[0]}") from failure[0]
    client.finish_weight_update(str(version))
    return report


class LLMSyncClient:
    """vLLM's offline `LLM` as a `VLLMWeightSyncClient` (vLLM ships the HTTP and Ray ones),
    for refit_engine in the process that holds the LLM."""

    def __init__(self, llm):
        self.llm = llm

    def init_weight_transfer_engine(self, init_info):
        self.llm.init_weight_transfer_engine({"init_info": init_info})

    def start_weight_update(self):
        self.llm.start_weight_update()

    def update_weights(self, update_info):
        self.llm.update_weights({"update_info": update_info})

    def finish_weight_update(self, weight_version=None):
        self.llm.finish_weight_update(weight_version=weight_version)


@dataclass
class RefitTrainerInitInfo(TrainerInitInfo):
    """`socket`: this node's refitd; `coordinator`: the coordinator's address (the sender
    asks it for each refit); `engine_socket`: refitd's socket on the engine's nodes (sent to
    the engine's workers at init); `parameters`: name -> this rank's tensor (DTensors
    register their local shards, plain tensors whole). `first_version`: the version the
    first send_weights publishes (then one more each time). `group`: the torch process
    group of the trainer ranks (default: torch's default group, when initialized)."""

    backend: ClassVar[str] = "refit"
    socket: str = "/run/refit/refitd.sock"
    coordinator: str = ""
    engine_socket: str = "/run/refit/refitd.sock"
    parameters: Optional[Mapping[str, Any]] = None
    bucket_bytes: int = 64 << 20
    first_version: int = 1
    timeout: float = 600.0
    group: Any = field(default=None, repr=False)


class RefitTrainerWeightTransferEngine(TrainerWeightTransferEngine[RefitTrainerInitInfo]):
    """The trainer side of the "refit" backend (see the module's docstring)."""

    init_info_cls = RefitTrainerInitInfo

    def __init__(self, *, client, init_info: RefitTrainerInitInfo, daemon, is_sender: bool):
        super().__init__(client=client, source=None, is_sender=is_sender)
        self.init_info = init_info
        self.daemon = daemon
        self.version = init_info.first_version
        self.last_report = None  # rank 0: the coordinator's RefitReport of the last version
        self.coordinator = refit.RefitClient(init_info.coordinator) if is_sender else None

    @classmethod
    def trainer_init(cls, init_info: RefitTrainerInitInfo, *, client, source=None):
        if not init_info.parameters:
            raise RefitInvalidInput("refit's trainer engine: RefitTrainerInitInfo.parameters "
                                    "names no tensors (give dict(model.named_parameters()))")
        if source is not None:
            raise RefitInvalidInput("refit's trainer engine reads the parameters in place: "
                                    "pass RefitTrainerInitInfo.parameters, not a WeightSource")
        if init_info.is_sender and not init_info.coordinator:
            raise RefitInvalidInput("refit's trainer engine: rank 0 asks the coordinator for "
                                    "each refit: set RefitTrainerInitInfo.coordinator")
        daemon = refit.LocalDaemon(init_info.socket)
        daemon.register_source(init_info.rank, tensors=dict(init_info.parameters))
        if init_info.is_sender:
            client.init_weight_transfer_engine({"socket": init_info.engine_socket,
                                                "bucket_bytes": init_info.bucket_bytes})
        return cls(client=client, init_info=init_info, daemon=daemon,
                   is_sender=init_info.is_sender)

    def send_weights(self) -> None:
        version = self.version
        self.daemon.publish(version)
        try:
            if self.is_sender:
                self._round_trip(version)
        finally:
            self._barrier()  # rank 0 reaches it failed or not: the others never hang
        self.version += 1

    def _round_trip(self, version: int) -> None:
        self.last_report = refit_engine(self.client, self.coordinator, version,
                                        self.init_info.timeout)

    def _barrier(self) -> None:
        import torch.distributed as dist

        if self.init_info.group is not None or (dist.is_available() and dist.is_initialized()):
            dist.barrier(group=self.init_info.group)

    def shutdown(self) -> None:
        if self.daemon is not None:
            self.daemon.close()
            self.daemon = None
        if self.coordinator is not None:
            self.coordinator.close()
            self.coordinator = None
