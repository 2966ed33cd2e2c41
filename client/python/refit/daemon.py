"""The node's refitd, as a trainer or inference process sees it: register the ranks this
process holds, publish a version (sources), wait for one (destinations)."""
from socket import gethostname
from typing import Any, Callable, Iterable, Mapping, Optional, Tuple, Union

import grpc

from ._channel import local_channel
from ._proto import refit_pb2, refit_pb2_grpc
from ._rank_stream import RankStream
from .buckets import Bucket, BucketMemory, BucketReceiver
from .dtensors import local_shards
from .errors import RefitError, RefitInvalidInput, from_rpc_error
from .in_place import InPlaceMemory
from .memory import RankMemory, refit_dtype
from .quantization import (SCHEME_BLOCK_FP8, SCHEME_CAST, SCHEME_DEQUANTIZE, BlockFp8, CastToBf16,
                           DequantizeFp8, codes_dtype_ok)
from .shards import Box
from .write_hooks import WriteHooks, WriteWatcher


class _RegistrationHold(RankStream):
    """The HoldRegistration stream: refitd keeps the rank's registration while it is open,
    and its end without the client ending it says refitd went away."""

    def _attaches(self, message):
        return True  # each message says refitd holds the registration


class RegisteredRank:
    """One registered rank: its boxes (`shards[name]`, refit.Box), its tensors
    (`tensors[name]`: the process's own when registered in place, else refit's, shaped like
    the boxes) and its registration, which refitd keeps while this process lives (and
    loses if refitd goes away: `refitd_lost`)."""

    def __init__(self, stub, role, rank, shards, memory, session):
        self.role = role
        self.rank = rank
        self.shards = shards
        self.memory = memory
        self.session = session
        self.buckets = None  # the BucketReceiver of a bucketed rank
        self.writes = None  # the WriteWatcher of a rank registered with hooks
        self._stub = stub
        self._hold = _RegistrationHold(
            stub.HoldRegistration(refit_pb2.HoldRegistrationRequest(session=session)), rank,
            "registration hold")

    def await_hold(self, timeout=10):
        """Returns once refitd confirmed it holds the registration for this process."""
        self._hold.await_attached(timeout)

    def _streams(self):
        return [s for s in (self._hold, self.buckets, self.writes) if s is not None]

    @property
    def refitd_lost(self) -> Optional[RefitError]:
        """None while refitd holds the registration; once a stream of the rank ended
        without this process ending it, the RefitUnavailable that says so: refitd went away
        (crashed, or restarted and forgot the rank), and the rank must be registered again
        (a new LocalDaemon) to take part in later epochs."""
        return next((s.lost for s in self._streams() if s.lost is not None), None)

    @property
    def tensors(self):
        return self.memory.tensors

    def load(self, new_tensors):
        """Copies new weights into refit's memory (ranks registered with shards): each
        tensor either of the global shape (its box is cut out of it) or the rank's local
        shard (copied as it is). Ranks registered in place need no load."""
        if not isinstance(self.memory, RankMemory):
            raise RefitInvalidInput(f"rank {self.rank}: refit did not allocate this rank's memory "
                                    f"(registered in place or bucketed): there is nothing to load")
        for name, box in self.shards.items():
            if name not in new_tensors:
                raise RefitInvalidInput(f"rank {self.rank}: no tensor {name} to load its shard "
                                        f"from")
            new = new_tensors[name]
            if tuple(new.shape) == box.global_shape:
                new = new[box.slices()]
            elif tuple(new.shape) != box.extent:
                raise RefitInvalidInput(f"rank {self.rank}: tensor {name} of shape "
                                        f"{tuple(new.shape)} is neither the global tensor "
                                        f"{box.global_shape} nor this rank's shard {box.extent}")
            self.memory.tensors[name].copy_(new)
        if self.memory.device.type == "cuda":
            import torch  # refitd reads the memory from its own CUDA context: finish first

            torch.cuda.synchronize(self.memory.device)

    def close(self):
        """Deregisters the rank (refitd ends the hold) and releases its memory. After
        refitd went away there is nothing to deregister: a restarted refitd may already
        hold a new registration of the rank, which must stay."""
        held = self._hold.lost is None
        for stream in self._streams():
            stream.expect_end()
        try:
            if held:
                self._stub.DeregisterRank(
                    refit_pb2.DeregisterRankRequest(role=self.role, rank=self.rank), timeout=10)
        except grpc.RpcError as e:
            if e.code() not in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE):
                raise from_rpc_error(e) from None
        finally:
            for stream in self._streams():
                stream.close()
            self.memory.close()


class LocalDaemon:
    """Talks to the refitd listening on the unix socket `socket`."""

    def __init__(self, socket: str = "/run/refit/refitd.sock"):
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

    @property
    def refitd_lost(self) -> Optional[RefitError]:
        """None while refitd holds every rank registered here; else the RefitUnavailable of
        the first rank it dropped (refitd went away). publish and wait_for_version raise it
        from then on: close this LocalDaemon and register the ranks again with a new one
        once refitd is back."""
        return next((r.refitd_lost for r in self._ranks if r.refitd_lost is not None), None)

    def register_source(self, rank: int, shards: Optional[Mapping[str, Tuple[Box, Any]]] = None,
                        device: Optional[str] = None, host: Optional[str] = None,
                        timeout: float = 60.0, *, tensors: Optional[Mapping[str, Any]] = None,
                        boxes: Optional[Mapping[str, Box]] = None,
                        fp8_codes: Iterable[str] = ()) -> "RegisteredRank":
        """Registers trainer rank `rank`; returns the RegisteredRank whose tensors refitd
        reads. Either `tensors` (name -> the rank's own torch tensor, its local shard) with
        `boxes` (name -> refit.Box: where it lies in the global tensor), read in place; or
        `shards` (name -> (refit.Box, torch dtype)), for which refit allocates memory that
        the trainer fills (RegisteredRank.load). `host` defaults to this node's name.
        Without `boxes`, torch DTensors (FSDP2, tensor parallelism) register their local
        shards with the boxes their meshes and placements give (refit.dtensors), and plain
        tensors as whole tensors.
        `fp8_codes`: tensors held as E4M3 codes (uint8 or float8_e4m3fn), declared F8_E4M3
        (an inference rank may hold them dequantized: refit.DequantizeFp8)."""
        if tensors is not None:
            tensors, boxes = local_shards(tensors, boxes)
        return self._register(refit_pb2.ROLE_SOURCE, rank, shards, tensors, boxes, device,
                              host, False, timeout, None,
                              quantized={name: _FP8_CODES for name in fp8_codes})

    def register_destination(self, rank: int,
                             shards: Optional[Mapping[str, Tuple[Box, Any]]] = None,
                             device: Optional[str] = None, host: Optional[str] = None,
                             staged: bool = False, timeout: float = 60.0, *,
                             tensors: Optional[Mapping[str, Any]] = None,
                             boxes: Optional[Mapping[str, Box]] = None,
                             dtypes: Optional[Mapping[str, Any]] = None,
                             bucket_bytes: Optional[int] = None,
                             on_bucket: Optional[Callable[[Bucket], None]] = None,
                             quantized: Optional[Mapping[str, Union[BlockFp8, CastToBf16,
                                                                    DequantizeFp8]]] = None,
                             hooks: Optional[WriteHooks] = None) -> "RegisteredRank":
        """Registers inference rank `rank`; refitd writes its tensors: the engine's own
        (`tensors` and `boxes`, written in place, fused parameters as views of one tensor)
        or refit's (`shards`). With `staged`, a failed epoch leaves them untouched (refitd
        writes a shadow, copied in at commit).

        Bucketed (weights refitd cannot hold on to): `boxes` and `dtypes` (name -> torch
        dtype), `bucket_bytes` and `on_bucket`, called on a thread of this process with
        each refit.Bucket refitd fills during an epoch (refit.copy_into(weights) copies
        the pieces into wherever the weights are then).

        `quantized` (name -> refit.BlockFp8): tensors held in FP8 E4M3 codes (uint8 or
        float8_e4m3fn) with their blocks' float32 scales in another registered tensor;
        refit quantizes the trainers' BF16/F32 weights on the way (refit.quantization).
        (name -> refit.CastToBf16()): a bfloat16 tensor whose trainers hold float32.
        (name -> refit.DequantizeFp8(scale_name)): a bfloat16 or float32 tensor whose trainers
        hold E4M3 codes and their blocks' scales in source tensor `scale_name`.

        `hooks` (refit.WriteHooks, or refit.WriteGate().hooks): the engine hears before refit
        writes this rank's weights and refit waits for it to pause (up to the job's
        pauseDeadlineMs; a replica not paused by then is skipped and catches up later), then
        hears of the commit or the abort (refit.write_hooks)."""
        bucket = None
        if bucket_bytes is not None or on_bucket is not None:
            if bucket_bytes is None or on_bucket is None or boxes is None or dtypes is None:
                raise RefitInvalidInput(f"rank {rank}: a bucketed rank gives boxes, dtypes, "
                                        f"bucket_bytes and on_bucket")
            if shards is not None or tensors is not None or staged:
                raise RefitInvalidInput(f"rank {rank}: a bucketed rank registers no tensors or "
                                        f"shards and cannot be staged (each bucket is copied in "
                                        f"as it arrives)")
            bucket = (bucket_bytes, on_bucket)
        elif dtypes is not None:
            raise RefitInvalidInput(f"rank {rank}: dtypes are for bucketed ranks (with "
                                    f"bucket_bytes and on_bucket)")
        return self._register(refit_pb2.ROLE_DESTINATION, rank, shards, tensors, boxes, device,
                              host, staged, timeout, bucket, dtypes, quantized or {}, hooks)

    def _register(self, role, rank, shards, tensors, boxes, device, host, staged, timeout,
                  bucket, dtypes=None, quantized=None, hooks=None):
        memory = _rank_memory(rank, shards, tensors, boxes, dtypes, device, bucket)
        layout = refit_pb2.RankLayout(rank=int(rank),
                                      host=gethostname() if host is None else host,
                                      views=memory.views, buffers=memory.buffers, staged=staged,
                                      bucketed=bucket is not None,
                                      pauses_for_writes=hooks is not None)
        if memory.device.type == "cuda":
            layout.device = memory.device_index
        specs = _tensor_specs(rank, memory, quantized or {})
        request = refit_pb2.RegisterRankRequest(role=role, layout=layout, tensors=specs)
        try:
            session = self._stub.RegisterRank(request, timeout=timeout).session
        except grpc.RpcError as e:
            memory.close()
            raise from_rpc_error(e) from None
        registered = RegisteredRank(self._stub, role, rank, dict(memory.boxes), memory, session)
        try:
            registered.await_hold()
            if bucket is not None:  # in place before the first epoch can need it
                registered.buckets = BucketReceiver(self._stub, session, memory, bucket[1])
                registered.buckets.await_attached()
            if hooks is not None:  # attached before the first epoch can ask it to pause
                registered.writes = WriteWatcher(self._stub, session, rank, hooks)
                registered.writes.await_attached()
        except BaseException:
            try:  # take the registration back and free the memory before saying so
                registered.close()
            except RefitError:
                pass  # refitd is unreachable: the first error says more
            raise
        self._ranks.append(registered)
        return registered

    def publish(self, version: int, timeout: float = 10.0) -> None:
        """Says every source rank registered here holds `version`, final."""
        for registered in self._ranks:
            if registered.role != refit_pb2.ROLE_SOURCE:
                continue
            if registered.refitd_lost is not None:
                raise registered.refitd_lost
            try:
                self._stub.Publish(refit_pb2.PublishRequest(rank=registered.rank,
                                                            version=int(version)),
                                   timeout=timeout)
            except grpc.RpcError as e:
                raise from_rpc_error(e) from None

    def wait_for_version(self, version: int, timeout: float = 60.0, *,
                         ignore_earlier_aborts: bool = False) -> Optional[int]:
        """Returns once every destination rank registered here holds `version` (or a later
        one); returns the version they hold. RefitError with DEADLINE_EXCEEDED at the
        timeout, ABORTED when the epoch failed, saying what the buffers hold (also when it
        failed before the call, unless `ignore_earlier_aborts`: a wait begun before the
        attempt it waits for, such as a retry)."""
        held = None
        for registered in self._ranks:
            if registered.role != refit_pb2.ROLE_DESTINATION:
                continue
            if registered.refitd_lost is not None:
                raise registered.refitd_lost
            request = refit_pb2.WaitForVersionRequest(
                rank=registered.rank, version=int(version), deadline_ms=int(timeout * 1000),
                ignore_earlier_aborts=ignore_earlier_aborts)
            try:
                got = self._stub.WaitForVersion(request, timeout=timeout + 5).version
            except grpc.RpcError as e:
                raise from_rpc_error(e) from None
            held = got if held is None else min(held, got)
        return held


# A source tensor's marker in `quantized`: it holds E4M3 codes (register_source's fp8_codes).
_FP8_CODES = object()


def _tensor_specs(rank, memory, quantized):
    """The TensorSpecs of a rank's tensors; those in `quantized` declared F8_E4M3 with their
    recipe (their torch dtype holds codes; their scale tensor is float32)."""
    unknown = sorted(set(quantized) - set(memory.boxes))
    if unknown:
        raise RefitInvalidInput(f"rank {rank}: quantized tensors {unknown} are not registered")
    specs = []
    for name, box in memory.boxes.items():
        recipe = quantized.get(name)
        if recipe is _FP8_CODES:
            if not codes_dtype_ok(memory.dtypes[name]):
                raise RefitInvalidInput(f"rank {rank}: tensor {name} holds E4M3 codes, so it is "
                                        f"uint8 or float8_e4m3fn, not {memory.dtypes[name]}")
            specs.append(refit_pb2.TensorSpec(name=name, dtype="F8_E4M3",
                                              shape=box.global_shape))
            continue
        if isinstance(recipe, DequantizeFp8):
            dtype = str(memory.dtypes[name])
            if dtype not in ("torch.bfloat16", "torch.float32"):
                raise RefitInvalidInput(f"rank {rank}: tensor {name} is dequantized, so it is "
                                        f"bfloat16 or float32, not {dtype}")
            specs.append(refit_pb2.TensorSpec(
                name=name, dtype=refit_dtype(memory.dtypes[name]), shape=box.global_shape,
                quantization=refit_pb2.Quantization(
                    scheme=SCHEME_DEQUANTIZE, scale_tensor=recipe.scale_tensor,
                    block=[1] * (len(box.global_shape) - 2) + list(recipe.block))))
            continue
        if isinstance(recipe, CastToBf16):
            if str(memory.dtypes[name]) != "torch.bfloat16":
                raise RefitInvalidInput(f"rank {rank}: tensor {name} is cast to bfloat16, so it is "
                                        f"bfloat16, not {memory.dtypes[name]}")
            specs.append(refit_pb2.TensorSpec(
                name=name, dtype="BF16", shape=box.global_shape,
                quantization=refit_pb2.Quantization(scheme=SCHEME_CAST)))
            continue
        if recipe is None:
            specs.append(refit_pb2.TensorSpec(name=name, dtype=refit_dtype(memory.dtypes[name]),
                                              shape=box.global_shape))
            continue
        if not codes_dtype_ok(memory.dtypes[name]):
            raise RefitInvalidInput(f"rank {rank}: tensor {name} holds E4M3 codes, so it is "
                                    f"uint8 or float8_e4m3fn, not {memory.dtypes[name]}")
        scale = memory.dtypes.get(recipe.scale_tensor)
        if str(scale) != "torch.float32":
            raise RefitInvalidInput(f"rank {rank}: the scales of {name}, {recipe.scale_tensor}, "
                                    f"are a registered float32 tensor" +
                                    ("" if scale is None else f", not {scale}"))
        specs.append(refit_pb2.TensorSpec(
            name=name, dtype="F8_E4M3", shape=box.global_shape,
            quantization=refit_pb2.Quantization(
                scheme=SCHEME_BLOCK_FP8, scale_tensor=recipe.scale_tensor,
                block=[1] * (len(box.global_shape) - 2) + list(recipe.block),
                recipe=recipe.recipe)))
    return specs


def _rank_memory(rank, shards, tensors, boxes, dtypes, device, bucket):
    """The memory a rank registers: a bucket (bucketed), its own tensors (in place) or
    memory refit allocates (shards)."""
    if bucket is not None:
        if device is not None:
            raise RefitInvalidInput(f"rank {rank}: a bucketed rank's bucket is host memory; "
                                    f"device is for shards refit allocates")
        return BucketMemory(rank, boxes, dtypes, bucket[0])
    if (shards is None) == (tensors is None):
        raise RefitInvalidInput(f"rank {rank}: give either shards (refit allocates the memory) or "
                                f"tensors and boxes (registered in place)")
    if tensors is not None:
        if device is not None:
            raise RefitInvalidInput(f"rank {rank}: tensors registered in place stay where they "
                                    f"are; device is for shards refit allocates")
        if not tensors:
            raise RefitInvalidInput(f"rank {rank}: no tensors to register")
        return InPlaceMemory(rank, tensors, boxes if boxes is not None else {})
    if not shards:
        raise RefitInvalidInput(f"rank {rank}: no shards to register")
    return RankMemory(rank, shards, device)
