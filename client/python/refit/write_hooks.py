"""The engine's side of an epoch: an inference rank registered with hooks
(register_destination(..., hooks=...)) hears from refitd before its weights are written,
and refit waits (up to the job's pauseDeadlineMs) for the engine to say it paused; then it
hears whether the version was committed or the epoch aborted, and resumes. A replica whose
engine does not pause in time is left out of that epoch (on_abort with the reason) and
catches up afterwards. If refitd goes away during a write (the stream of notices breaks
before the commit or the abort), that write counts as aborted: on_abort with a reason
starting "refitd went away", and the engine serves the weights it held (a write cut off
half way may have changed some of them, unless the rank is staged). The rank's
registration went with refitd: register it again once refitd is back (README).

    hooks = refit.WriteHooks(on_before_write=engine.pause,        # returns once paused
                             on_commit=lambda version: engine.resume(),
                             on_abort=lambda version, reason: engine.resume())

or a gate the generation loop holds for each step (refit waits for the step under way,
the next step waits for the commit):

    gate = refit.WriteGate()
    daemon.register_destination(rank, tensors=..., boxes=..., hooks=gate.hooks)
    while serving:
        with gate:
            engine.step()
"""
import threading
import traceback
from typing import Callable, Optional

import grpc

from ._proto import refit_pb2
from ._rank_stream import RankStream

_NOTICE = refit_pb2.WriteNotice


class WriteHooks:
    """What an engine does around refit's writes: `on_before_write(version)` returns once
    the engine stopped reading its weights; `on_commit(version)` and
    `on_abort(version, reason)` come after (version -1: the epoch did not say)."""

    def __init__(self, on_before_write: Optional[Callable[[int], None]] = None,
                 on_commit: Optional[Callable[[int], None]] = None,
                 on_abort: Optional[Callable[[int, str], None]] = None):
        self.on_before_write = on_before_write
        self.on_commit = on_commit
        self.on_abort = on_abort


class WriteGate:
    """A gate between generation steps (`with gate:`) and refit's writes: a write waits
    for the steps under way, and steps wait while a write is under way (from the first
    rank's before-write to the last rank's commit or abort). `version` is the last version
    committed; `aborted` the reason of the last epoch that was not."""

    def __init__(self):
        self._cond = threading.Condition()
        self._steps = 0
        self._writes = 0  # ranks between before-write and commit or abort
        self.version = None
        self.aborted = None
        self.hooks = WriteHooks(self._before_write, self._commit, self._abort)

    def __enter__(self):
        with self._cond:
            self._cond.wait_for(lambda: self._writes == 0)
            self._steps += 1
        return self

    def __exit__(self, *exc):
        with self._cond:
            self._steps -= 1
            self._cond.notify_all()

    def _before_write(self, version):
        with self._cond:
            self._writes += 1
            self._cond.wait_for(lambda: self._steps == 0)

    def _end_write(self):
        self._writes = max(0, self._writes - 1)
        self._cond.notify_all()

    def _commit(self, version):
        with self._cond:
            self.version = version
            self._end_write()

    def _abort(self, version, reason):
        with self._cond:
            self.aborted = reason
            self._end_write()


class WriteWatcher(RankStream):
    """Holds a rank's WatchWrites stream open on a thread and calls its WriteHooks: each
    BEFORE_WRITE is answered with Paused once on_before_write returns, and ended by exactly
    one on_commit or on_abort (refitd's COMMITTED, ABORTED or SKIPPED, or the stream's
    loss)."""

    def __init__(self, stub, session, rank, hooks: WriteHooks):
        self._stub = stub
        self._session = session
        self._hooks = hooks
        self._writing = None  # the version of the BEFORE_WRITE not yet ended (reader thread)
        super().__init__(stub.WatchWrites(refit_pb2.WatchWritesRequest(session=session)), rank,
                         "write notices")

    def _call(self, hook, *args):
        if hook is None:
            return True
        try:
            hook(*args)
            return True
        except Exception as e:  # the engine's error: refit skips it rather than wait
            self.failure = e
            traceback.print_exc()
            return False

    def _attaches(self, notice):
        return notice.kind == _NOTICE.ATTACHED

    def _take(self, notice):
        if notice.kind == _NOTICE.BEFORE_WRITE:
            self._writing = notice.version
            if self._call(self._hooks.on_before_write, notice.version):
                try:
                    self._stub.Paused(refit_pb2.PausedRequest(
                        session=self._session, pause_id=notice.pause_id), timeout=30)
                except grpc.RpcError as e:
                    # Too late: refit moved on without this rank (SKIPPED follows).
                    if e.code() != grpc.StatusCode.FAILED_PRECONDITION:
                        raise
        elif notice.kind == _NOTICE.COMMITTED:
            self._writing = None
            self._call(self._hooks.on_commit, notice.version)
        else:  # ABORTED or SKIPPED
            self._writing = None
            self._call(self._hooks.on_abort, notice.version, notice.reason)

    def _on_lost(self, reason):
        # No commit or abort will come for the write under way: the engine must not wait
        # for one (a WriteGate would keep every step out for good).
        if self._writing is not None:
            version, self._writing = self._writing, None
            self._call(self._hooks.on_abort, version, reason)
