"""The vLLM-style engine of the dense model: one process with TP ranks 0..tp-1, each
holding fused qkv_proj and gate_up_proj parameters, registered in place (refitd writes the
engine's parameters themselves). After each version it compares, with torch.equal, every
engine parameter with the trainers' shards of that version fused the engine's way.

With --pause the engine generates all along (a step reads every parameter twice) and
pauses while refit writes (refit.WriteGate): no step may see its weights change.

    dense_inference.py --socket S --out DIR [--steps N] [--pause]
"""
import os
import threading
import time

import torch

import refit
from dense import (arguments, engine_parameters, global_shapes, resident_bytes, shard_file)
from refit import conventions


def trainer_weights(out, version, tp):
    """The full tensors of `version`, put together from every trainer's saved shards."""
    full = {name: torch.zeros(shape) for name, shape in global_shapes().items()}
    for tp_rank in range(tp):
        for name, shard in torch.load(shard_file(out, version, tp_rank)).items():
            full[name][conventions.megatron_box(name, full[name].shape, tp_rank, tp).slices()] = \
                shard
    return full


def wrong_parameters(engines, full, tp):
    """The engine parameters (of every TP rank's `engines`) that differ from the full
    tensors `full` fused the engine's way: "rank R name" each."""
    wrong = []
    for tp_rank, engine in enumerate(engines):
        expected = conventions.fuse_like_vllm(full, tp_rank, tp)
        for name, param in engine.items():
            if not torch.equal(param, expected[name]):
                wrong.append(f"rank {tp_rank} {name}")
    return wrong


class Generation:
    """Steps of a stand-in for generation on a thread, each inside the gate: it reads every
    engine parameter, waits a little, and reads them again; `changed` counts the steps
    whose weights changed under them."""

    def __init__(self, engines, gate):
        self.engines, self.gate = engines, gate
        self.steps = self.changed = 0
        self._cond = threading.Condition()  # guards steps and changed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _fingerprint(self):
        return [float(p.double().sum()) for e in self.engines for p in e.values()]

    def _run(self):
        while not self._stop.is_set():
            with self.gate:
                before = self._fingerprint()
                time.sleep(0.002)
                with self._cond:  # counted inside the gate: a paused engine counts no step
                    self.steps += 1
                    self.changed += before != self._fingerprint()
                    self._cond.notify_all()

    def await_step_after(self, steps, timeout):
        """Whether a step ends after the first `steps` within `timeout` seconds."""
        with self._cond:
            return self._cond.wait_for(lambda: self.steps > steps, timeout)

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=30)


def main():
    parser = arguments(__doc__)
    parser.add_argument("--pause", action="store_true",
                        help="generate all along, pausing while refit writes")
    args = parser.parse_args()
    engines = [engine_parameters(r, args.tp) for r in range(args.tp)]
    held = sum(p.numel() * p.element_size() for e in engines for p in e.values())
    gate = refit.WriteGate() if args.pause else None
    paused_for = []  # the version of each before-write the engine heard
    hooks = None
    if gate:
        hooks = refit.WriteHooks(
            on_before_write=lambda v: (paused_for.append(v), gate.hooks.on_before_write(v)),
            on_commit=gate.hooks.on_commit, on_abort=gate.hooks.on_abort)
    with refit.LocalDaemon(args.socket) as daemon:
        before = resident_bytes()
        for tp_rank, engine in enumerate(engines):
            tensors, boxes = conventions.vllm_views(engine, global_shapes(), tp_rank, args.tp)
            daemon.register_destination(tp_rank, tensors=tensors, boxes=boxes,
                                        hooks=hooks)
        grown = resident_bytes() - before
        print(f"inference: {held} bytes registered in place, resident memory grew by {grown} "
              f"bytes", flush=True)
        generation = Generation(engines, gate) if gate else None
        for version in range(args.first_version, args.first_version + args.steps):
            daemon.wait_for_version(version, timeout=60)
            if gate:  # checked inside the gate: the weights of `version`, not a later one
                gate.__enter__()
            wrong = wrong_parameters(engines, trainer_weights(args.out, version, args.tp),
                                     args.tp)
            if wrong:
                raise SystemExit(f"version {version}: wrong parameters: {', '.join(wrong)}")
            count = sum(len(e) for e in engines)
            print(f"version {version}: {count} engine parameters equal to the trainers' "
                  f"weights", flush=True)
            if gate:
                gate.__exit__(None, None, None)
            open(os.path.join(args.out, f"checked-{version}"), "w").close()
        if generation:
            generation.stop()
            print(f"generation: {generation.steps} steps, {generation.changed} saw their "
                  f"weights change; last version committed {gate.version}; paused for "
                  f"versions {', '.join(map(str, sorted(paused_for)))}", flush=True)


if __name__ == "__main__":
    main()
