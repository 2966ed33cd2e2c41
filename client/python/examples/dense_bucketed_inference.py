"""A vLLM-style engine of the dense model whose weights move: before every version it
re-creates its parameters (as an engine does when it wakes from sleep mode, or reallocates
its weights), so refitd cannot hold on to them. Its TP ranks register bucketed instead:
boxes and dtypes, and one small staging bucket each; refitd fills the bucket during the
epoch and refit.copy_into copies each piece into the fused parameters that exist then.
After each version every engine parameter is compared, with torch.equal, with the
trainers' shards fused the engine's way.

    dense_bucketed_inference.py --socket S --out DIR [--bucket-bytes B] [--steps N]
"""
import os
import threading

import refit
from dense import arguments, engine_parameters, global_shapes, resident_bytes
from dense_inference import trainer_weights, wrong_parameters
from refit import conventions


def main():
    parser = arguments(__doc__)
    parser.add_argument("--bucket-bytes", type=int, default=1 << 20)
    args = parser.parse_args()
    shapes = global_shapes()
    # The weights of the current version, re-created before each one; the callbacks find
    # them through `state`.
    state = {"views": {}}
    lock = threading.Lock()
    counts = {}  # (version, rank) -> [buckets, bytes, last seen]

    def recreate_weights():
        engines = [engine_parameters(r, args.tp) for r in range(args.tp)]
        state["engines"] = engines
        state["views"] = {r: conventions.vllm_views(e, shapes, r, args.tp)[0]
                          for r, e in enumerate(engines)}

    def on_bucket_of(tp_rank):
        copy = refit.copy_into(lambda: state["views"][tp_rank])

        def on_bucket(bucket):
            copy(bucket)
            with lock:
                seen = counts.setdefault((bucket.version, tp_rank), [0, 0, False])
                seen[0] += 1
                seen[1] += sum(p.tensor.numel() * p.tensor.element_size() for p in bucket.pieces)
                seen[2] = seen[2] or bucket.last

        return on_bucket

    recreate_weights()
    with refit.LocalDaemon(args.socket) as daemon:
        before = resident_bytes()
        for tp_rank in range(args.tp):
            tensors, boxes = conventions.vllm_views(state["engines"][tp_rank], shapes, tp_rank,
                                                    args.tp)
            dtypes = {name: t.dtype for name, t in tensors.items()}
            daemon.register_destination(tp_rank, boxes=boxes, dtypes=dtypes,
                                        bucket_bytes=args.bucket_bytes,
                                        on_bucket=on_bucket_of(tp_rank))
        grown = resident_bytes() - before
        held = sum(p.numel() * p.element_size() for e in state["engines"] for p in e.values())
        print(f"inference: {held} bytes of weights, registered bucketed with "
              f"{args.bucket_bytes}-byte buckets, resident memory grew by {grown} bytes",
              flush=True)
        for version in range(args.first_version, args.first_version + args.steps):
            daemon.wait_for_version(version, timeout=60)
            wrong = wrong_parameters(state["engines"],
                                     trainer_weights(args.out, version, args.tp), args.tp)
            if wrong:
                raise SystemExit(f"version {version}: wrong parameters: {', '.join(wrong)}")
            with lock:
                seen = [counts.get((version, r), [0, 0, False]) for r in range(args.tp)]
            if not all(last for _, _, last in seen):
                raise SystemExit(f"version {version}: committed before every rank's last "
                                 f"bucket arrived: {seen}")
            buckets = sum(b for b, _, _ in seen)
            moved = sum(n for _, n, _ in seen)
            count = sum(len(e) for e in state["engines"])
            print(f"version {version}: {count} engine parameters equal to the trainers' "
                  f"weights, {moved} bytes in {buckets} buckets", flush=True)
            recreate_weights()  # the next version lands in new tensors
            open(os.path.join(args.out, f"checked-{version}"), "w").close()


if __name__ == "__main__":
    main()
