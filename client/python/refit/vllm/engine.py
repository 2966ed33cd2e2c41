"""refit as a vLLM weight-transfer engine (vLLM 0.32's `WeightTransferEngine`).

Each vLLM worker is one refit destination rank, registered with the node's refitd at
`init_weight_transfer_engine`: its boxes of the checkpoint tensors are what its own loaders
read (refit.vllm.loader_layout), so with tensor parallelism a worker receives only its
share. The rank is bucketed: vLLM's parameters are not refit's to write in place (on CPU
its linears are repacked into kernel formats and the parameters emptied; quantized
layers are post-processed), so pieces arrive in a bounded bucket, are assembled per
checkpoint tensor, and each complete tensor goes through the model's `load_weights`
inside vLLM's layerwise reload session (started by `start_weight_update`, finished by
`finish_weight_update`), exactly as a checkpoint-format engine of vLLM's own does.

`update_weights({"version": v})` returns once version v is in this worker's parameters
and refit has committed it (refitd's `wait_for_version`); it raises when the epoch
aborts, when a tensor never arrives, when refitd goes away, or at the update's timeout.
A refit that reaches a worker outside start..finish is refused, and fails its epoch.

After finish_weight_update, the caller resets vLLM's prefix cache (`LLM.reset_prefix_cache`,
or the server's `/pause?clear_cache=true` ... `/resume`): cached KV blocks were computed
with the old weights and vLLM's weight-update path keeps them.

refit commits a version to this worker only once the worker has loaded it: the epoch's
last bucket is handed back to refitd after `update_weights` loaded every tensor, so a
version refit calls held is in vLLM's parameters (a refit nobody loads fails its epoch after
`drain_timeout`, and the engine keeps serving what it held).

Threading: refit's client calls `_on_bucket` on its stream thread; it only copies pieces
out of the bucket into assembly tensors and queues complete ones, under `_lock`, and waits
(`_progress`, at most `drain_timeout`) while more than two buckets' worth of them wait for
the worker, and, at the last bucket, until the worker loaded them all. Every call from vLLM
(init, start, update, finish, shutdown) comes on the worker's thread, the only one that
touches the model."""
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Dict, Optional

import grpc
from vllm.distributed.weight_transfer.base import (WeightTransferEngine,
                                                   WeightTransferInitInfo,
                                                   WeightTransferUpdateInfo)

from ..errors import (RefitAborted, RefitDataLoss, RefitInvalidInput, RefitRejected,
                      RefitTimeout)
from .assembly import TensorAssembly
from .checkpoint import checkpoint_specs
from .loader_layout import check_every_parameter_filled, loader_layout

# Under vLLM's logger: its format, its level (VLLM_LOGGING_LEVEL), its handlers.
logger = logging.getLogger("vllm.refit")


@dataclass
class RefitInitInfo(WeightTransferInitInfo):
    """`socket`: the node's refitd. The worker registers destination rank `rank_offset` +
    its index among the engine's workers (data-parallel rank x world size + pipeline rank
    x tensor-parallel size + tensor-parallel rank). `bucket_bytes`: refitd's staging
    bucket for this worker (the extra memory a refit costs it). `drain_timeout`: how long an
    arriving version waits for `update_weights` to load it before its epoch fails."""

    socket: str
    rank_offset: int = 0
    bucket_bytes: int = 64 << 20
    register_timeout: float = 60.0
    drain_timeout: float = 60.0


@dataclass
class RefitUpdateInfo(WeightTransferUpdateInfo):
    """The version to wait for, and how long to wait for it."""

    version: int
    timeout: float = 600.0


def worker_index(parallel_config) -> int:
    """This worker's index among the engine's workers (vLLM's data-parallel, pipeline and
    tensor-parallel ranks, in that order)."""
    from vllm.distributed import parallel_state

    tensor_rank = parallel_state.get_tensor_model_parallel_rank()
    pipeline_rank = parallel_state.get_pp_group().rank_in_group
    return (parallel_config.data_parallel_rank * parallel_config.world_size
            + pipeline_rank * parallel_config.tensor_parallel_size + tensor_rank)


class RefitWeightTransferEngine(WeightTransferEngine[RefitInitInfo, RefitUpdateInfo]):
    """vLLM's weight-transfer engine named "refit" (see the module's docstring)."""

    init_info_cls = RefitInitInfo
    update_info_cls = RefitUpdateInfo

    def __init__(self, config, vllm_config, device, model):
        super().__init__(config, vllm_config, device, model)
        self.daemon = None
        self.rank: Optional[int] = None
        self.layout = None
        self.stats: Dict[str, object] = {}
        self._lock = threading.Lock()
        # The worker loaded a queued tensor, or the whole of an epoch, or the update ended.
        self._progress = threading.Condition(self._lock)
        self._armed = False  # between start_weight_update and finish_weight_update
        self._queued_bytes = 0  # complete tensors waiting for the worker to load them
        self._queue_limit = 0
        self._drain_timeout = 60.0
        self._loaded_epoch: Optional[str] = None  # the last epoch the worker loaded whole
        self._arrivals: "queue.Queue" = queue.Queue()
        self._assembly: Optional[TensorAssembly] = None
        self._epoch: Optional[str] = None

    # ---- init: the worker's destination rank ------------------------------------------
    def init_transfer_engine(self, init_info: RefitInitInfo) -> None:
        import refit

        self.shutdown()  # a second init registers afresh
        started = time.monotonic()
        specs = checkpoint_specs(self.model_config.model)
        self.layout = loader_layout(self.model, self.model_config, specs)
        check_every_parameter_filled(self.layout)
        if not self.layout.boxes:
            raise RefitInvalidInput("refit's vLLM backend: this worker's loaders read none of "
                                    "the checkpoint's tensors")
        laid_out = time.monotonic()
        self.rank = init_info.rank_offset + worker_index(self.parallel_config)
        box_bytes = [b.elements * self.layout.dtypes[n].itemsize
                     for n, b in self.layout.boxes.items()]
        with self._lock:
            self._assembly = TensorAssembly(self.layout.boxes, self.layout.dtypes)
            # Tensors run ahead of the worker's loading by at most this much (and one
            # tensor, whatever its size): the engine's extra memory stays bounded.
            self._queue_limit = max(2 * init_info.bucket_bytes, max(box_bytes))
            self._drain_timeout = init_info.drain_timeout
        self.daemon = refit.LocalDaemon(init_info.socket)
        self.daemon.register_destination(
            self.rank, boxes=self.layout.boxes, dtypes=self.layout.dtypes,
            bucket_bytes=init_info.bucket_bytes, on_bucket=self._on_bucket,
            timeout=init_info.register_timeout)
        needed = sum(box_bytes)
        self.stats = dict(rank=self.rank, tensors=len(self.layout.boxes), bytes=needed,
                          whole=len(self.layout.whole), skipped=len(self.layout.skipped),
                          layout_s=round(laid_out - started, 4),
                          register_s=round(time.monotonic() - laid_out, 4))
        logger.info("refit: worker registered destination rank %d with %s: %d checkpoint "
                    "tensors, %d bytes (%d needed whole, %d not this model's or rank's)",
                    self.rank, init_info.socket, len(self.layout.boxes), needed,
                    len(self.layout.whole), len(self.layout.skipped))

    # ---- refit's stream thread ----------------------------------------------------------
    def _on_bucket(self, bucket) -> None:
        with self._lock:
            if not self._armed:
                raise RefitRejected(grpc.StatusCode.FAILED_PRECONDITION,
                                    f"vLLM worker (destination rank {self.rank}) is not in a "
                                    f"weight update: call start_weight_update before refitting "
                                    f"version {bucket.version}")
            if self._epoch != bucket.epoch_id:
                self._assembly.clear()  # what an earlier, failed epoch left
                self._epoch = bucket.epoch_id
                self._arrivals.put(("epoch", bucket.epoch_id, bucket.version))
            for piece in bucket.pieces:
                complete = self._assembly.add(piece)
                if complete is not None:
                    self._arrivals.put(("tensor", piece.name, complete))
                    self._queued_bytes += complete.numel() * complete.element_size()
            # Backpressure: the bucket is handed back (and the epoch goes on) once the
            # worker has loaded enough of what is queued.
            self._await_worker(bucket, lambda: self._queued_bytes <= self._queue_limit,
                               "load the tensors queued before it")
            if bucket.last:
                # Handed back, and so committed, once the worker loaded the whole version.
                self._arrivals.put(("last", bucket.epoch_id, bucket.version))
                self._await_worker(bucket, lambda: self._loaded_epoch == bucket.epoch_id,
                                   "load the version")

    def _await_worker(self, bucket, done, what) -> None:
        """Waits (under `_lock`) until `done()`; raises, failing the epoch, when the weight
        update ends first or nothing calls update_weights to load what arrives."""
        if not self._progress.wait_for(lambda: done() or not self._armed,
                                       timeout=self._drain_timeout):
            raise RefitTimeout(grpc.StatusCode.DEADLINE_EXCEEDED,
                               f"vLLM worker (destination rank {self.rank}): nothing called "
                               f"update_weights to {what} (version {bucket.version}) within "
                               f"{self._drain_timeout:g} s")
        if not self._armed:
            raise RefitRejected(grpc.StatusCode.FAILED_PRECONDITION,
                                f"vLLM worker (destination rank {self.rank}): the weight "
                                f"update ended while version {bucket.version} arrived")

    # ---- vLLM's calls, on the worker's thread -------------------------------------------
    def start_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        if self.daemon is None:
            raise RefitRejected(grpc.StatusCode.FAILED_PRECONDITION,
                                "refit: init_weight_transfer_engine was not called on this worker")
        initialize_layerwise_reload(self.model)
        with self._lock:
            self._assembly.clear()
            self._epoch = None
            self._arrivals = queue.Queue()
            self._queued_bytes = 0
            self._loaded_epoch = None
            self._armed = True

    def receive_weights(self, update_info: RefitUpdateInfo) -> None:
        try:
            self._receive(int(update_info.version), update_info.timeout)
        except BaseException:
            # Ends the failed update's layerwise session: layers it loaded hold the new
            # version, layers it began a mix, the others the old one. The caller keeps the
            # engine paused and starts the update again (the version's epoch can run again).
            self.finish_weight_update()
            raise

    def _receive(self, version: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        started = time.monotonic()
        arrivals = self._arrivals
        # refitd says when the version is committed to this rank, or that its epoch
        # aborted (a failure anywhere in it), on a thread of its own: both end the wait.
        threading.Thread(target=self._await_commit, args=(version, deadline, arrivals),
                         name=f"refit-commit-{version}", daemon=True).start()
        loaded, filled, loading_s, epoch = set(), set(), 0.0, None
        last_seen = committed = False
        while not (last_seen and committed):
            kind, first, second = self._next_arrival(arrivals, version, deadline, len(loaded))
            if kind == "epoch":
                if second != version:
                    raise RefitAborted(grpc.StatusCode.ABORTED,
                                       f"refit: destination rank {self.rank} waits for version "
                                       f"{version} but epoch {first} brings version {second}")
                if loaded:
                    raise RefitAborted(grpc.StatusCode.ABORTED,
                                       f"refit: epoch {first} started over after {len(loaded)} "
                                       f"tensors of version {version} were loaded: start the "
                                       f"weight update again")
                epoch = first
            elif kind == "tensor":
                began = time.monotonic()
                names = self.model.load_weights([(first, second)])
                loading_s += time.monotonic() - began
                with self._lock:
                    self._queued_bytes -= second.numel() * second.element_size()
                    self._progress.notify_all()
                loaded.add(first)
                filled |= set(names or ())
            elif kind == "last":
                last_seen = True
                self._check_loaded_whole(version, epoch, loaded, filled)
                with self._lock:
                    self._loaded_epoch = epoch  # the last bucket is handed back: commit
                    self._progress.notify_all()
            elif kind == "committed":
                committed = True
                if epoch is None:  # held already (an earlier update): nothing comes
                    logger.info("refit: destination rank %d already holds version %d (%s)",
                                self.rank, version, first)
                    return
            else:  # "aborted"
                raise first
        self.stats.update(version=version, epoch=epoch, tensors_loaded=len(loaded),
                          peak_partial_bytes=self._assembly.peak_partial_bytes,
                          load_weights_s=round(loading_s, 4),
                          receive_s=round(time.monotonic() - started, 4))

    def _check_loaded_whole(self, version, epoch, loaded, filled) -> None:
        """Raises DATA_LOSS, before the epoch commits, unless every tensor this rank needs
        arrived and vLLM's loaders wrote every parameter the dry run saw them write."""
        missing = sorted(set(self.layout.boxes) - loaded)
        if missing:
            raise RefitDataLoss(grpc.StatusCode.DATA_LOSS,
                                f"refit: epoch {epoch} of version {version} ended without "
                                f"{len(missing)} tensor(s) destination rank {self.rank} "
                                f"needs: {', '.join(missing[:5])}")
        unfilled = sorted(self.layout.filled_parameters() - filled)
        if unfilled:
            raise RefitDataLoss(grpc.StatusCode.DATA_LOSS,
                                f"refit: vLLM's load_weights left parameter(s) "
                                f"{', '.join(unfilled[:5])} of destination rank {self.rank} "
                                f"unwritten for version {version}")

    def _await_commit(self, version, deadline, arrivals):
        try:
            # Begun before this attempt's epoch: an earlier attempt's abort is not this one's.
            held = self.daemon.wait_for_version(version,
                                                timeout=max(1.0, deadline - time.monotonic()),
                                                ignore_earlier_aborts=True)
            arrivals.put(("committed", held, None))
        except Exception as error:  # ABORTED, a timeout, refitd gone: the update fails
            arrivals.put(("aborted", error, None))

    def _next_arrival(self, arrivals, version, deadline, loaded_count):
        left = deadline - time.monotonic()
        try:
            return arrivals.get(timeout=max(left, 0.001))
        except queue.Empty:
            raise RefitTimeout(grpc.StatusCode.DEADLINE_EXCEEDED,
                               f"refit: version {version} did not reach destination rank "
                               f"{self.rank} in time ({loaded_count} of "
                               f"{len(self.layout.boxes)} tensors arrived)") from None

    def finish_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        with self._lock:
            self._armed = False
            self._progress.notify_all()
            if self._assembly is not None:
                self._assembly.clear()
        finalize_layerwise_reload(self.model, self.model_config)

    def shutdown(self) -> None:
        if self.daemon is not None:
            self.daemon.close()  # refitd forgets the rank
            self.daemon = None
