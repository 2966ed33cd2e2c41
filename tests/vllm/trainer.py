"""One trainer rank of a two-rank torch job (gloo, CPU) over the model make_model.py wrote:
FSDP2 (`fully_shard` per decoder layer and the whole model) or DTensor tensor parallelism
(`parallelize_module`: q/k/v and gate/up column-wise, o and down row-wise). Its parameters
(DTensors) are registered in place as refit source rank RANK, their boxes read from the
DTensors. Each optimizer step (AdamW) is published as the next version; rank 0 writes the
full weights of each version for the engine's reference check (WORK/weights-V.safetensors,
then WORK/published-V), and every rank waits for WORK/refitted-V before the next step, as
an RL loop waits for its rollouts.
    trainer.py --rank R --parallel fsdp2|tp --model DIR --socket REFITD --work DIR"""
import argparse

import torch
import torch.distributed as dist
from safetensors.torch import save_file
from torch.distributed.device_mesh import init_device_mesh
from transformers import LlamaForCausalLM

import refit
from markers import wait_for

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




def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--parallel", choices=["fsdp2", "tp"], required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--steps", type=int, default=3)
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
    daemon = refit.LocalDaemon(args.socket)
    registered = daemon.register_source(args.rank, tensors=parameters)
    print(f"trainer {args.rank}: registered {len(parameters)} parameters ({sharded} DTensors, "
          f"{args.parallel}) in place as source rank {args.rank}: "
          f"{sum(b.elements for b in registered.shards.values()) * 4} bytes", flush=True)
    generator = torch.Generator().manual_seed(1234)  # the same batch on both ranks
    for version in range(1, args.steps + 1):
        tokens = torch.randint(0, model.config.vocab_size, (2, 32), generator=generator)
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        daemon.publish(version)
        full = {name: (p.full_tensor() if isinstance(p, torch.distributed.tensor.DTensor)
                       else p).detach().contiguous() for name, p in parameters.items()}
        if args.rank == 0:
            save_file(full, f"{args.work}/weights-{version}.safetensors")
            with open(f"{args.work}/published-{version}", "w") as marker:
                marker.write(f"{loss.item()}\n")
        print(f"trainer {args.rank}: step {version}, loss {loss.item():.4f}, published", flush=True)
        wait_for(f"{args.work}/refitted-{version}", f"trainer {args.rank}")
    dist.barrier()
    daemon.close()
    dist.destroy_process_group()
    print(f"trainer {args.rank}: done", flush=True)


if __name__ == "__main__":
    main()
