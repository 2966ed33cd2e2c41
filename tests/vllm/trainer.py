"""One trainer rank of a two-rank torch job (gloo, CPU) over the model make_model.py wrote:
FSDP2 (`fully_shard` per decoder layer and the whole model) or DTensor tensor parallelism
(`parallelize_module`: q/k/v and gate/up column-wise, o and down row-wise). Its parameters
(DTensors) are registered in place as refit source rank RANK, their boxes read from the
DTensors. Each optimizer step (AdamW) is the next version; rank 0 writes each version's
full weights for the engine's reference check (WORK/weights-V.safetensors). Each rank's
resident memory may not grow by a copy of its share while a version is refitted (refit
reads the parameters in place): the run fails if it grows by an eighth. Then either
(Publisher) every rank publishes it and waits for the engine's driver to have refitted it
(offline.py), or (Driver, --drive) the ranks send it through vLLM's trainer-side API with
the backend named "refit" to vLLM's server (server.py), rank 0 pausing the server around it.
    trainer.py --rank R --parallel fsdp2|tp --model DIR --socket REFITD --work DIR
               [--drive --coordinator HOST:PORT --engine-socket REFITD]"""
import argparse
import json
import os
import threading
import time

import torch
import torch.distributed as dist
from safetensors.torch import save_file
from torch.distributed.device_mesh import init_device_mesh
from transformers import LlamaForCausalLM

import refit
from markers import wait_for
from memory import PeakGrowth
from reference import PROMPTS
from serving import complete, post

WORLD = 2


def shard(model, parallel, mesh):
    if parallel == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)

    plan = {}
    for i in range(len(model.model.layers)):
        for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                     "mlp.gate_proj", "mlp.up_proj"):
            plan[f"model.layers.{i}.{name}"] = ColwiseParallel()
        for name in ("self_attn.o_proj", "mlp.down_proj"):
            plan[f"model.layers.{i}.{name}"] = RowwiseParallel()
    parallelize_module(model, mesh, plan)




class Publisher:
    """Registers the parameters with refitd and publishes each version; the engine's
    driver (offline.py) refits it and says so (WORK/refitted-V)."""

    def __init__(self, args, parameters):
        self.args = args
        self.daemon = refit.LocalDaemon(args.socket)
        registered = self.daemon.register_source(args.rank, tensors=parameters)
        self.bytes = sum(b.elements for b in registered.shards.values()) * 4

    def send(self, version):
        self.daemon.publish(version)
        if self.args.rank == 0:
            open(f"{self.args.work}/published-{version}", "w").close()
        wait_for(f"{self.args.work}/refitted-{version}", f"trainer {self.args.rank}")

    def close(self):
        self.daemon.close()


class Driver:
    """vLLM's trainer-side API with the backend named "refit" and vLLM's HTTP client of the
    server (server.py): the trainer engine registers the parameters and, on each
    send_weights, publishes and (rank 0) drives the server's weight-update routes. Around
    it rank 0 pauses the server (/pause?mode=wait) and resumes it, asking one request while
    paused, and records the times for server.py (WORK/refitted-V, JSON)."""

    def __init__(self, args, parameters):
        import refit.vllm
        from refit.vllm.trainer import RefitTrainerInitInfo
        from vllm.distributed.weight_transfer import WeightTransferTrainerFactory
        from vllm.distributed.weight_transfer.clients import HTTPVLLMWeightSyncClient

        self.args = args
        wait_for(f"{args.work}/server-url", f"trainer {args.rank}")
        with open(f"{args.work}/server-url") as marker:
            self.url = marker.read()
        refit.vllm.register()
        self.engine = WeightTransferTrainerFactory.trainer_init(
            RefitTrainerInitInfo(rank=args.rank, socket=args.socket,
                                 coordinator=args.coordinator, engine_socket=args.engine_socket,
                                 parameters=parameters, bucket_bytes=1 << 20),
            client=HTTPVLLMWeightSyncClient(self.url))
        self.bytes = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel()
                         for p in parameters.values()) * 4

    def send(self, version):
        if self.args.rank != 0:
            self.engine.send_weights()
        else:
            self._send_paused(version)
        wait_for(f"{self.args.work}/checked-{version}", f"trainer {self.args.rank}")

    def _send_paused(self, version):
        wait_for(f"{self.args.work}/asking-{version}", "trainer 0")
        pausing = time.monotonic()
        post(self.url, "/pause", params={"mode": "wait", "clear_cache": "true"})
        paused = time.monotonic()
        asked = []
        asker = threading.Thread(target=lambda: asked.append(
            (complete(self.url, self.args.model, PROMPTS[1]), time.monotonic())))
        asker.start()
        self.engine.send_weights()
        if asked:
            raise SystemExit("trainer 0: a request asked while paused was answered before "
                             "/resume")
        post(self.url, "/resume")
        resumed = time.monotonic()
        asker.join(timeout=120)
        if not asked:
            raise SystemExit("trainer 0: the request asked while paused was not answered "
                             "after /resume")
        with open(f"{self.args.work}/refitted-{version}.new", "w") as marker:
            json.dump({"pausing": pausing, "paused": paused, "resumed": resumed,
                       "asked_while_paused": asked[0][0], "answered": asked[0][1],
                       "bytes": self.engine.last_report.bytes}, marker)
        os.rename(f"{self.args.work}/refitted-{version}.new",
                  f"{self.args.work}/refitted-{version}")

    def close(self):
        self.engine.shutdown()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--parallel", choices=["fsdp2", "tp"], required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--drive", action="store_true",
                        help="refit through vLLM's trainer API and the server (server.py)")
    parser.add_argument("--coordinator", default="")
    parser.add_argument("--engine-socket", default="")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{args.work}/trainer-group",
                            rank=args.rank, world_size=WORLD)
    mesh = init_device_mesh("cpu", (WORLD,))
    model = LlamaForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    shard(model, args.parallel, mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    parameters = dict(model.named_parameters())
    sharded = sum(isinstance(p, torch.distributed.tensor.DTensor) for p in parameters.values())
    sender = (Driver if args.drive else Publisher)(args, parameters)
    print(f"trainer {args.rank}: registered {len(parameters)} parameters ({sharded} DTensors, "
          f"{args.parallel}) in place as source rank {args.rank}: {sender.bytes} bytes",
          flush=True)
    generator = torch.Generator().manual_seed(1234)  # the same batch on both ranks
    for version in range(1, args.steps + 1):
        tokens = torch.randint(0, model.config.vocab_size, (2, 32), generator=generator)
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        full = {name: (p.full_tensor() if isinstance(p, torch.distributed.tensor.DTensor)
                       else p).detach().contiguous() for name, p in parameters.items()}
        if args.rank == 0:
            save_file(full, f"{args.work}/weights-{version}.safetensors")
        growth = PeakGrowth(os.getpid())
        sender.send(version)
        extra = growth.bytes()
        if extra * 8 > sender.bytes:  # a copy of the share would be all of it
            raise SystemExit(f"trainer {args.rank}: resident memory grew by {extra} bytes "
                             f"during the refit of version {version}: more than an eighth of "
                             f"its share of the weights ({sender.bytes}); refit reads the "
                             f"parameters in place")
        print(f"trainer {args.rank}: step {version}, loss {loss.item():.4f}, refitted; "
              f"resident memory peaked {extra} bytes above its start during the refit "
              f"(its share of the weights: {sender.bytes})", flush=True)
    dist.barrier()
    sender.close()
    dist.destroy_process_group()
    print(f"trainer {args.rank}: done", flush=True)


if __name__ == "__main__":
    main()
