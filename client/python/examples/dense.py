"""A small dense Llama-style model (Hugging Face tensor names) for the in-place example and
its end-to-end test: Megatron-style tensor-parallel trainers each hold only their shards as
their own parameters; a vLLM-style engine holds fused qkv_proj and gate_up_proj
parameters. Both register those tensors in place."""
import argparse
import ctypes
import os

import torch

from refit import conventions

CONFIG = {"vocab": 4096, "hidden": 512, "heads": 8, "kv_heads": 2, "intermediate": 1536,
          "layers": 4}


def global_shapes(config=CONFIG):
    """HF name -> shape of every tensor of the model."""
    hidden, head_dim = config["hidden"], config["hidden"] // config["heads"]
    kv = config["kv_heads"] * head_dim
    shapes = {"model.embed_tokens.weight": (config["vocab"], hidden),
              "model.norm.weight": (hidden,), "lm_head.weight": (config["vocab"], hidden)}
    for layer in range(config["layers"]):
        p = f"model.layers.{layer}."
        shapes.update({
            p + "input_layernorm.weight": (hidden,),
            p + "post_attention_layernorm.weight": (hidden,),
            p + "self_attn.q_proj.weight": (hidden, hidden),
            p + "self_attn.k_proj.weight": (kv, hidden),
            p + "self_attn.v_proj.weight": (kv, hidden),
            p + "self_attn.o_proj.weight": (hidden, hidden),
            p + "mlp.gate_proj.weight": (config["intermediate"], hidden),
            p + "mlp.up_proj.weight": (config["intermediate"], hidden),
            p + "mlp.down_proj.weight": (hidden, config["intermediate"]),
        })
    return shapes


def trainer_shards(tp_rank, tp_size, seed=0):
    """The parameters Megatron TP rank `tp_rank` holds: only its shards (HF names)."""
    generator = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape in global_shapes().items():
        full = torch.randn(shape, generator=generator) / shape[-1] ** 0.5
        box = conventions.megatron_box(name, shape, tp_rank, tp_size)
        params[name] = torch.nn.Parameter(full[box.slices()].clone())
    return params


def engine_parameters(tp_rank, tp_size):
    """What a vLLM-style engine holds on TP rank `tp_rank` (its initial weights, here all
    -1, until refit writes them): vLLM's parameter names, q/k/v and gate/up fused."""
    like = {name: torch.empty(shape) for name, shape in global_shapes().items()}
    return {name: torch.nn.Parameter(torch.full_like(t, -1.0), requires_grad=False)
            for name, t in conventions.fuse_like_vllm(like, tp_rank, tp_size).items()}


def resident_bytes():
    """This process's resident memory (VmRSS), once glibc has given back what is free
    (so that two readings compare what the process holds, not what its allocator kept)."""
    ctypes.CDLL(None).malloc_trim(0)
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def arguments(description):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--socket", required=True, help="the node's refitd socket")
    parser.add_argument("--out", required=True, help="folder for weights and hand-offs")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--first-version", type=int, default=1)
    parser.add_argument("--tp", type=int, default=2)
    return parser


def shard_file(out, version, tp_rank):
    return os.path.join(out, f"shards-{version}-{tp_rank}.pt")
