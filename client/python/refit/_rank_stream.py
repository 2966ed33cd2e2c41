"""A server stream refitd holds open for one rank of this process (its buckets, its write
notices), read on a thread: the first message says refitd attached it, each later one goes
to the subclass's _take."""
import threading

import grpc

from .errors import error_for


class RankStream:
    def __init__(self, stream, rank, what):
        self._stream = stream
        self._rank = rank
        self._what = what
        self._attached = threading.Event()
        self.failure = None  # the last callback error, for the caller to inspect
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def await_attached(self, timeout=10):
        if not self._attached.wait(timeout):
            raise error_for(grpc.StatusCode.UNAVAILABLE,
                            f"rank {self._rank}: refitd did not open its {self._what}")

    def _attaches(self, message):
        raise NotImplementedError

    def _take(self, message):
        raise NotImplementedError

    def _run(self):
        try:
            for message in self._stream:
                if self._attaches(message):
                    self._attached.set()
                else:
                    self._take(message)
        except grpc.RpcError:
            pass  # cancelled at close, or refitd went away (an epoch sees it)
        finally:
            # However it ended, refitd must see the stream go, or an epoch would wait for
            # an answer that never comes until its deadline.
            self._stream.cancel()
            self._attached.set()

    def close(self):
        self._stream.cancel()
        self._thread.join(timeout=5)
