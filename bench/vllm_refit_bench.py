"""One side of bench/vllm_refit.sh: the vLLM engine (--role engine) or one of the two FSDP2
trainer ranks (--role trainer). Rounds alternate two ways of moving a version from the
trainers into the live engine:

  refit     the trainers' parameters registered in place; each version published and moved
            by refit into the engine's workers (backend "refit": start_weight_update,
            update_weights while the coordinator runs the epoch, finish_weight_update)
  gather    what a vLLM user writes today: every trainer rank gathers the full state dict
            (DTensor.full_tensor), rank 0 writes it to /dev/shm (safetensors), and the engine
            loads it in every worker through `LLM.collective_rpc` (model.load_weights inside
            vLLM's layerwise reload)

Per round and way: seconds from the trainers' step to the engine holding the version, the
engine's pause window (the update: while it serves nothing), and the peak extra resident
memory of the engine (its process tree) and of trainer rank 0 during the move."""
import argparse
import json
import os
import statistics
import threading
import time

import psutil
import torch

from markers import wait_for
from reference import tree_rss

WORLD = 2


class PeakMemory:
    """The largest resident size of a process (and, with `tree`, its children) since the
    last reset, sampled every 5 ms on a thread of its own."""

    def __init__(self, tree):
        self.process = psutil.Process()
        self.tree = tree
        self.peak = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._sample, daemon=True).start()

    def rss(self):
        return tree_rss(self.process) if self.tree else self.process.memory_info().rss

    def _sample(self):
        while True:
            size = self.rss()
            with self.lock:
                self.peak = max(self.peak, size)
            time.sleep(0.005)

    def reset(self):
        """The resident size now, from which the next peak is measured."""
        size = self.rss()
        with self.lock:
            self.peak = size
        return size

    def extra_since(self, base):
        with self.lock:
            return self.peak - base


def load_checkpoint(worker, path):
    """collective_rpc: every worker loads the full checkpoint at `path` into its model."""
    from safetensors.torch import load_file
    from vllm.model_executor.model_loader.reload import (finalize_layerwise_reload,
                                                         initialize_layerwise_reload)

    model = worker.get_model()
    initialize_layerwise_reload(model)
    model.load_weights(load_file(path).items())
    finalize_layerwise_reload(model, worker.vllm_config.model_config)


def engine(args):
    import refit
    from refit.vllm.trainer import LLMSyncClient, refit_engine
    from vllm import LLM

    llm = LLM(model=args.model, dtype="float32", enforce_eager=True, seed=0,
              tensor_parallel_size=args.tp, max_model_len=256, max_num_seqs=4,
              distributed_executor_backend="mp" if args.tp > 1 else None,
              weight_transfer_config={"backend": "refit"})
    engine_client = LLMSyncClient(llm)
    engine_client.init_weight_transfer_engine({"socket": args.socket, "bucket_bytes": 64 << 20})
    coordinator = refit.RefitClient(args.coordinator)
    memory = PeakMemory(tree=True)
    open(f"{args.work}/engine-ready", "w").close()
    rows = []
    for round_ in range(args.rounds):
        for way, version in (("refit", 2 * round_ + 1), ("gather", 2 * round_ + 2)):
            wait_for(f"{args.work}/ready-{version}", "engine")
            with open(f"{args.work}/ready-{version}") as marker:
                trainer = json.load(marker)
            base = memory.reset()
            started = time.monotonic()
            if way == "refit":
                refit_engine(engine_client, coordinator, version, timeout=600)
            else:
                llm.collective_rpc(load_checkpoint, args=(trainer["path"],))
            window = time.monotonic() - started
            llm.reset_prefix_cache()
            if way == "refit":
                stats = llm.collective_rpc(_engine_stats)[0]
                print(f"engine: version {version}: worker 0 {stats}", flush=True)
            rows.append(dict(way=way, round=round_, window=window,
                             seconds=time.monotonic() - trainer["stepped"],
                             engine_extra=memory.extra_since(base),
                             trainer_extra=trainer["extra"]))
            open(f"{args.work}/done-{version}", "w").close()
    report(rows, args)


def _engine_stats(worker):
    return dict(worker.weight_transfer_engine.stats)


def report(rows, args):
    size = os.path.getsize(f"{args.model}/model.safetensors")
    print(f"vLLM TP {args.tp} (CPU), trainers FSDP2 x {WORLD}, model {size / 1e6:.0f} MB "
          f"float32, {args.rounds} rounds of each (median [min-max]):")
    print("| way | seconds (step -> engine holds it) | engine pause window | engine peak "
          "extra | trainer rank 0 peak extra |")
    print("| --- | --- | --- | --- | --- |")

    def spread(values, scale, unit):
        values = [v / scale for v in values]
        return (f"{statistics.median(values):.3f}{unit} [{min(values):.3f}-"
                f"{max(values):.3f}]") if unit == " s" else f"{statistics.median(values):.0f} MB"

    for way in ("refit", "gather"):
        mine = [r for r in rows if r["way"] == way]
        print(f"| {way} | {spread([r['seconds'] for r in mine], 1, ' s')} | "
              f"{spread([r['window'] for r in mine], 1, ' s')} | "
              f"{spread([r['engine_extra'] for r in mine], 1e6, ' MB')} | "
              f"{spread([r['trainer_extra'] for r in mine], 1e6, ' MB')} |", flush=True)


def trainer(args):
    import torch.distributed as dist
    from safetensors.torch import save_file
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import LlamaForCausalLM

    import refit

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{args.work}/trainer-group",
                            rank=args.rank, world_size=WORLD)
    mesh = init_device_mesh("cpu", (WORLD,))
    model = LlamaForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    parameters = dict(model.named_parameters())
    daemon = refit.LocalDaemon(args.socket)
    daemon.register_source(args.rank, tensors=parameters)
    memory = PeakMemory(tree=False)
    generator = torch.Generator().manual_seed(1234)
    path = f"/dev/shm/refit-bench-{os.getpid()}.safetensors"
    wait_for(f"{args.work}/engine-ready", f"trainer {args.rank}", timeout=600)
    for version in range(1, 2 * args.rounds + 1):
        tokens = torch.randint(0, 512, (1, 16), generator=generator)
        model(input_ids=tokens, labels=tokens).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        stepped = time.monotonic()
        base = memory.reset()
        if version % 2:  # refit: published where the weights are
            daemon.publish(version)
        else:  # gather: the full state dict on rank 0, written where the engine reads it
            full = {name: p.full_tensor().detach() for name, p in parameters.items()}
            if args.rank == 0:
                save_file(full, path)
            del full
        if args.rank == 0:
            with open(f"{args.work}/ready-{version}.new", "w") as marker:
                json.dump({"stepped": stepped, "extra": memory.extra_since(base),
                           "path": path}, marker)
            os.rename(f"{args.work}/ready-{version}.new", f"{args.work}/ready-{version}")
        wait_for(f"{args.work}/done-{version}", f"trainer {args.rank}", timeout=1200)
    if os.path.exists(path):
        os.unlink(path)
    dist.barrier()
    daemon.close()
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--role", choices=["engine", "trainer"], required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--coordinator", default="")
    args = parser.parse_args()
    (engine if args.role == "engine" else trainer)(args)


if __name__ == "__main__":
    main()
