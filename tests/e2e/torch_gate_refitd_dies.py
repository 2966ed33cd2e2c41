"""The engine of torch_gate_refitd_dies.sh: the dense model's vLLM-style engine (TP ranks 0
and 1, parameters registered in place) generating all along on a thread, each step inside
refit.WriteGate. Rank 0 pauses through the gate; rank 1 is slow to pause (its hook returns
only once rank 0's write ended), which holds the first epoch between rank 0's pause and
the commit: there the script kills refitd. Rank 0's write must then end as an abort and
generation go on. Then the engine does what client/python/README.md says an engine does
after refitd restarts: it registers its ranks again, with a new LocalDaemon, and checks the
version the next refit writes.

    torch_gate_refitd_dies.py --socket S --out DIR
"""
import os
import threading
import time

import refit
from dense import arguments, engine_parameters, global_shapes
from dense_inference import Generation, trainer_weights, wrong_parameters
from refit import conventions

VERSION = 1


def log(line):
    print(line, flush=True)


def register(socket, engines, hooks_of):
    """A new LocalDaemon with both TP ranks registered in place, `hooks_of(rank)` each."""
    daemon = refit.LocalDaemon(socket)
    try:
        for tp_rank, engine in enumerate(engines):
            tensors, boxes = conventions.vllm_views(engine, global_shapes(), tp_rank,
                                                    len(engines))
            daemon.register_destination(tp_rank, tensors=tensors, boxes=boxes,
                                        hooks=hooks_of(tp_rank), timeout=10)
    except BaseException:
        daemon.close()
        raise
    return daemon


def register_once_refitd_is_back(socket, engines, hooks_of, timeout):
    give_up = time.monotonic() + timeout
    while True:
        try:
            return register(socket, engines, hooks_of)
        except refit.RefitUnavailable:
            if time.monotonic() > give_up:
                raise
            time.sleep(0.1)  # refitd is not listening yet: nothing to wait on but time


def main():
    args = arguments(__doc__).parse_args()
    engines = [engine_parameters(r, args.tp) for r in range(args.tp)]
    gate = refit.WriteGate()
    # Generation starts once the ranks are registered: registering in place moves the
    # parameters into shared memory, which no step may read meanwhile.
    generation = None
    generating = threading.Event()
    rank_1_asked = threading.Event()  # rank 1 heard of the first epoch's write
    write_ended = threading.Event()  # rank 0's write of the first epoch
    paused_at = []  # the step count when rank 0 paused

    def rank_0_pauses(version):
        if not generating.wait(30):
            raise RuntimeError("generation did not start")
        gate.hooks.on_before_write(version)
        paused_at.append(generation.steps)
        if not rank_1_asked.wait(30):
            raise RuntimeError("rank 1 did not hear of the write")
        log(f"rank 0 paused for version {version} after {generation.steps} steps")

    def rank_0_aborts(version, reason):
        log(f"rank 0: on_abort({version}): {reason}")
        gate.hooks.on_abort(version, reason)
        write_ended.set()

    def rank_1_is_slow(version):
        rank_1_asked.set()
        write_ended.wait(60)

    first = {0: refit.WriteHooks(rank_0_pauses, gate.hooks.on_commit, rank_0_aborts),
             1: refit.WriteHooks(rank_1_is_slow, gate.hooks.on_commit,
                                 lambda v, reason: log(f"rank 1: on_abort({v}): {reason}"))}
    daemon = register(args.socket, engines, first.get)
    generation = Generation(engines, gate)
    generating.set()
    log("registered")

    if not write_ended.wait(120):
        raise SystemExit("rank 0's write did not end")
    ended = generation.steps
    started = time.monotonic()
    if not generation.await_step_after(ended, 10):
        raise SystemExit("generation took no step in 10 s after rank 0's write ended")
    log(f"generation stepped again {time.monotonic() - started:.3f} s after rank 0's write "
        f"ended; {ended - paused_at[0]} steps while rank 0 was paused")
    lost = daemon.refitd_lost
    log(f"refitd_lost: {lost}")
    try:
        daemon.wait_for_version(VERSION, timeout=1)
        raise SystemExit("wait_for_version did not say refitd went away")
    except refit.RefitUnavailable as e:
        log(f"wait_for_version: {type(e).__name__}: {e}")
    daemon.close()  # nothing to deregister: refitd forgot the ranks

    daemon = register_once_refitd_is_back(args.socket, engines, lambda rank: gate.hooks, 60)
    log("registered again")
    with daemon:
        daemon.wait_for_version(VERSION, timeout=120)
        with gate:  # the weights of VERSION, not a later one's half
            wrong = wrong_parameters(engines, trainer_weights(args.out, VERSION, args.tp),
                                     args.tp)
        if wrong:
            raise SystemExit(f"version {VERSION}: wrong parameters: {', '.join(wrong)}")
        log(f"version {VERSION}: {sum(len(e) for e in engines)} engine parameters equal to "
            f"the trainers' weights")
        open(os.path.join(args.out, f"checked-{VERSION}"), "w").close()
        generation.stop()
    log(f"generation: {generation.steps} steps, {generation.changed} saw their weights change; "
        f"last version committed {gate.version}")


if __name__ == "__main__":
    main()
