"""The engine's gate around refit's writes, without a daemon: a write waits for the
generation steps under way and no step starts until every rank's write ended (committed or
aborted); the gate remembers the last version committed and the last abort's reason."""
import threading
import time
import unittest

import refit


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


if __name__ == "__main__":
    unittest.main()
