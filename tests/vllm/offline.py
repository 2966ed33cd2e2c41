"""A vLLM engine (CPU) serving the model make_model.py wrote, with refit as its weight
transfer backend chosen by name, refitted after each of the trainers' steps through vLLM's
own calls: init_weight_transfer_engine once; per version start_weight_update,
update_weights (while refit moves the version), finish_weight_update, reset_prefix_cache.

After each version its greedy tokens and their logprobs for fixed prompts are compared with
a reference forward of transformers' model loaded with the trainers' full weights of that
version (WORK/weights-V.safetensors); a mismatch fails the run, as does an update during
which the engine's resident memory grows by a copy of the weights.
Before version 1, two refits must fail: one outside a weight update, one that nothing loads.
    offline.py --tp N --model DIR --socket REFITD --coordinator HOST:PORT --work DIR"""
import argparse
import os
import time

import psutil
from vllm import LLM, SamplingParams

import refit
from refit.vllm.trainer import LLMSyncClient, refit_engine
from markers import wait_for
from memory import PeakGrowth
from reference import NEW_TOKENS, PROMPTS, check, reference, tree_rss

# How long an arriving version waits for update_weights: short, for unloaded_refit_fails.
DRAIN_TIMEOUT = 5.0


def served(llm):
    outputs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS],
                           SamplingParams(max_tokens=NEW_TOKENS, temperature=0, logprobs=0),
                           use_tqdm=False)
    results = []
    for output in outputs:
        completion = output.outputs[0]
        tokens = list(completion.token_ids)
        results.append((tokens, [step[t].logprob for step, t in zip(completion.logprobs, tokens)]))
    return results


def refit_fails(coordinator, case, reason):
    """Refits version 1, which must fail its epoch with `reason` in the error (`case` says
    what kind of refit it is)."""
    try:
        coordinator.refit(1, timeout=60)
    except refit.RefitError as error:
        if reason not in str(error):
            raise SystemExit(f"engine: {case} failed otherwise: {error}")
        print(f"engine: {case} fails its epoch: {error}", flush=True)
    else:
        raise SystemExit(f"engine: {case} was committed")


def refused_outside_an_update(llm, coordinator, model_dir):
    """A refit while vLLM is not in a weight update fails its epoch, naming why, and the
    engine goes on serving what it held (the version can be refitted afterwards)."""
    refit_fails(coordinator, "a refit outside a weight update", "not in a weight update")
    check("version 0 after the refused refit", served(llm), reference(model_dir))


def unloaded_refit_fails(llm, coordinator, model_dir):
    """A refit that reaches workers in a weight update that nothing loads (no
    update_weights) fails its epoch once the drain timeout passes, instead of committing a
    version the engine does not hold; the engine goes on serving what it held."""
    llm.start_weight_update()
    try:
        refit_fails(coordinator, "a refit nobody loads", "nothing called update_weights")
    finally:
        llm.finish_weight_update()
    check("version 0 after the unloaded refit", served(llm), reference(model_dir))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--model", required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--coordinator", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--versions", type=int, default=3)
    args = parser.parse_args()
    llm = LLM(model=args.model, dtype="float32", enforce_eager=True, seed=0,
              tensor_parallel_size=args.tp, max_model_len=256, max_num_seqs=4,
              distributed_executor_backend="mp" if args.tp > 1 else None,
              weight_transfer_config={"backend": "refit"})
    check("version 0", served(llm), reference(args.model))
    me = psutil.Process()
    before = tree_rss(me)
    engine = LLMSyncClient(llm)
    engine.init_weight_transfer_engine({"socket": args.socket, "bucket_bytes": 1 << 20,
                                        "drain_timeout": DRAIN_TIMEOUT})
    print(f"engine: {args.tp} worker(s) registered with refitd; the engine grew by "
          f"{tree_rss(me) - before} bytes", flush=True)
    coordinator = refit.RefitClient(args.coordinator)
    weights = os.path.getsize(f"{args.model}/model.safetensors")
    for version in range(1, args.versions + 1):
        wait_for(f"{args.work}/published-{version}", "engine")
        if version == 1:
            refused_outside_an_update(llm, coordinator, args.model)
            unloaded_refit_fails(llm, coordinator, args.model)
        started = time.monotonic()
        growth = PeakGrowth(me.pid, tree=True)
        report = refit_engine(engine, coordinator, version, timeout=120)
        llm.reset_prefix_cache()
        window = time.monotonic() - started
        extra = growth.bytes()
        # vLLM's layerwise reload materializes and re-processes each module, and refit
        # queues at most two buckets: together far from a copy of the weights.
        if extra >= weights:
            raise SystemExit(f"engine: version {version}: resident memory grew by {extra} "
                             f"bytes during the update: a copy of the weights ({weights})")
        check(f"version {version}", served(llm),
              reference(args.model, f"{args.work}/weights-{version}.safetensors"))
        print(f"engine: version {version}: greedy tokens and logprobs equal the reference's; "
              f"{report.bytes} bytes moved, update window {window:.3f} s, weight version "
              f"{llm.get_weight_version()}; resident memory peaked {extra} bytes above its "
              f"start", flush=True)
        open(f"{args.work}/refitted-{version}", "w").close()
    print("engine: done", flush=True)


if __name__ == "__main__":
    main()
