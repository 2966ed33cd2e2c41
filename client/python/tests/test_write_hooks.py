"""The engine's gate around refit's writes, without a daemon: a write waits for the
generation steps under way and no step starts until every rank's write ended (committed or
aborted); the gate remembers the last version committed and the last abort's reason. A
rank's stream of write notices that breaks during a write (refitd went away) ends that write
as an abort, so the gate opens again; one the client closes does not."""
import threading
import time
import unittest

import grpc

import refit
from refit._proto import refit_pb2
from refit.write_hooks import WriteWatcher

_NOTICE = refit_pb2.WriteNotice


class WriteGateTest(unittest.TestCase):
    def test_a_write_waits_for_the_step_under_way_and_the_next_step_for_the_commit(self):
        gate = refit.WriteGate()
        events = []
        step_may_end = threading.Event()

        def step():
            with gate:
                events.append("step started")
                step_may_end.wait(5)
                events.append("step ended")

        stepper = threading.Thread(target=step)
        stepper.start()
        while not events:
            time.sleep(0.01)
        writer = threading.Thread(
            target=lambda: (gate.hooks.on_before_write(3), events.append("paused")))
        writer.start()
        time.sleep(0.1)
        self.assertEqual(events, ["step started"])  # the write waits for the step
        step_may_end.set()
        writer.join(5)
        stepper.join(5)
        self.assertEqual(events, ["step started", "step ended", "paused"])

        # While the write is under way, a step waits until it is committed.
        later = threading.Thread(target=lambda: (gate.__enter__(), events.append("next step"),
                                                 gate.__exit__(None, None, None)))
        later.start()
        time.sleep(0.1)
        self.assertEqual(events[-1], "paused")
        gate.hooks.on_commit(3)
        later.join(5)
        self.assertEqual(events[-1], "next step")
        self.assertEqual(gate.version, 3)

    def test_steps_wait_for_every_rank_of_the_process_and_an_abort_ends_a_write(self):
        gate = refit.WriteGate()
        gate.hooks.on_before_write(4)  # two ranks of one engine, paused for one epoch
        gate.hooks.on_before_write(4)
        started = threading.Event()
        waiter = threading.Thread(target=lambda: (gate.__enter__(), started.set(),
                                                  gate.__exit__(None, None, None)))
        waiter.start()
        gate.hooks.on_commit(4)
        self.assertFalse(started.wait(0.1))  # one rank is still being written
        gate.hooks.on_abort(4, "skipped: too slow")
        self.assertTrue(started.wait(5))
        waiter.join(5)
        self.assertEqual(gate.aborted, "skipped: too slow")
        # A stray end (no write under way) does not let the count go below zero.
        gate.hooks.on_commit(4)
        with gate:
            pass



class _StreamError(grpc.RpcError):
    def __init__(self, code, details):
        super().__init__(details)
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


class _NoticeStream:
    """A WatchWrites stream as grpc hands it to the client: the notices, then it waits
    until refitd goes away (`break_off`: UNAVAILABLE) or the client cancels it
    (CANCELLED)."""

    def __init__(self, notices):
        self._notices = list(notices)
        self._ended = threading.Event()
        self._error = None

    def __iter__(self):
        yield from self._notices
        self._ended.wait(10)
        raise self._error or _StreamError(grpc.StatusCode.DEADLINE_EXCEEDED, "test timed out")

    def break_off(self):
        self._error = _StreamError(grpc.StatusCode.UNAVAILABLE, "Socket closed")
        self._ended.set()

    def cancel(self):
        if not self._ended.is_set():
            self._error = _StreamError(grpc.StatusCode.CANCELLED, "Locally cancelled")
            self._ended.set()


class _Refitd:
    """The two calls a WriteWatcher makes."""

    def __init__(self, stream):
        self.stream = stream
        self.paused = threading.Event()

    def WatchWrites(self, request):
        return self.stream

    def Paused(self, request, timeout):
        self.paused.set()


class LostStreamTest(unittest.TestCase):
    def watch(self, *notices):
        self.aborts = []
        self.aborted = threading.Event()
        self.gate = refit.WriteGate()
        hooks = refit.WriteHooks(
            on_before_write=self.gate.hooks.on_before_write,
            on_commit=self.gate.hooks.on_commit,
            on_abort=lambda v, reason: (self.aborts.append((v, reason)),
                                        self.gate.hooks.on_abort(v, reason),
                                        self.aborted.set()))
        self.refitd = _Refitd(_NoticeStream(
            [_NOTICE(kind=_NOTICE.ATTACHED)] + [_NOTICE(**n) for n in notices]))
        watcher = WriteWatcher(self.refitd, "session", 0, hooks)
        watcher.await_attached()
        return watcher

    def step_runs(self, timeout):
        stepped = threading.Event()

        def step():
            with self.gate:
                stepped.set()

        threading.Thread(target=step, daemon=True).start()
        return stepped.wait(timeout)

    def test_refitd_going_away_during_a_write_aborts_it_and_the_gate_opens(self):
        watcher = self.watch(dict(kind=_NOTICE.BEFORE_WRITE, version=7, pause_id="p-1"))
        self.assertTrue(self.refitd.paused.wait(5))
        self.assertFalse(self.step_runs(0.1))  # paused for the write
        self.refitd.stream.break_off()
        self.assertTrue(self.aborted.wait(5))
        self.assertEqual(self.aborts, [(7, "refitd went away: UNAVAILABLE: Socket closed")])
        self.assertTrue(self.step_runs(5))
        self.assertEqual(self.gate.aborted, "refitd went away: UNAVAILABLE: Socket closed")
        self.assertIsInstance(watcher.lost, refit.RefitUnavailable)
        self.assertIn("rank 0: refitd went away", str(watcher.lost))
        watcher.close()
        self.assertEqual(len(self.aborts), 1)

    def test_a_close_by_the_client_is_no_abort(self):
        watcher = self.watch(dict(kind=_NOTICE.BEFORE_WRITE, version=7, pause_id="p-1"))
        self.assertTrue(self.refitd.paused.wait(5))
        watcher.close()
        self.assertFalse(self.aborted.wait(0.2))
        self.assertIsNone(watcher.lost)

    def test_a_loss_after_the_commit_aborts_nothing(self):
        watcher = self.watch(dict(kind=_NOTICE.BEFORE_WRITE, version=7, pause_id="p-1"),
                             dict(kind=_NOTICE.COMMITTED, version=7))
        self.assertTrue(self.step_runs(5))  # the commit reopened the gate
        self.refitd.stream.break_off()
        watcher._thread.join(5)
        self.assertIsNotNone(watcher.lost)
        self.assertEqual(self.aborts, [])
        self.assertEqual(self.gate.version, 7)


if __name__ == "__main__":
    unittest.main()
