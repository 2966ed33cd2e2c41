"""A server stream refitd holds open for one rank of this process (its registration hold,
its buckets, its write notices), read on a thread: the first message says refitd attached
it, each later one goes to the subclass's _take. A stream that ends without the client
ending it means refitd went away (or dropped the registration): `lost` says so, and the
subclass's _on_lost settles what was under way."""
import threading

import grpc

from .errors import error_for, from_rpc_error


class RankStream:
    """Threads: the reader thread runs _attaches, _take and _on_lost; expect_end and close
    come from the rank's owner. `lost` is written once, by the reader, before the thread
    ends."""

    def __init__(self, stream, rank, what):
        self._stream = stream
        self._rank = rank
        self._what = what
        self._attached = threading.Event()
        self._ending = False  # the client ends the stream itself: no loss
        self.failure = None  # the last callback error, for the caller to inspect
        self.lost = None  # RefitUnavailable once the stream ended without the client ending it
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def await_attached(self, timeout=10):
        if not self._attached.wait(timeout):
            raise error_for(grpc.StatusCode.UNAVAILABLE,
                            f"rank {self._rank}: refitd did not open its {self._what}")
        if self.lost is not None:
            raise self.lost

    def _attaches(self, message):
        raise NotImplementedError

    def _take(self, message):
        raise NotImplementedError

    def _on_lost(self, reason):
        """The stream ended without the client ending it; `reason` starts "refitd went
        away". Nothing more comes down it."""

    def _read(self):
        """Reads the stream to its end; returns what ended it."""
        try:
            for message in self._stream:
                if self._attaches(message):
                    self._attached.set()
                else:
                    self._take(message)
        except grpc.RpcError as e:
            return str(from_rpc_error(e))
        return f"it ended the rank's {self._what}"

    def _run(self):
        try:
            ended = self._read()
            if not self._ending:
                self.lost = error_for(
                    grpc.StatusCode.UNAVAILABLE,
                    f"rank {self._rank}: refitd went away ({ended}), and the rank's registration "
                    f"with it: register the rank again once refitd is back")
                self._on_lost(f"refitd went away: {ended}")
        finally:
            # However it ended, refitd must see the stream go, or an epoch would wait for
            # an answer that never comes until its deadline.
            self._stream.cancel()
            self._attached.set()

    def expect_end(self):
        """The client is about to end the stream (close, or its rank's deregistration):
        that end is not refitd going away."""
        self._ending = True

    def close(self):
        self.expect_end()
        self._stream.cancel()
        self._thread.join(timeout=5)
