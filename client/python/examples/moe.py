"""A small mixture-of-experts model and two layouts of it, for the example and the
end-to-end test: trainers split the experts (expert parallel) and the embedding rows;
inference ranks split every expert's hidden dimension and the embedding columns (tensor
parallel), with the router and norms replicated. The output scale (one row) is cut as
torch.chunk cuts it, so the last inference rank's shard of it is empty."""
import argparse

import torch
from torch import nn

import refit


class MoELayer(nn.Module):
    def __init__(self, dim, hidden, experts):
        super().__init__()
        self.norm = nn.Parameter(torch.ones(dim))
        self.router = nn.Linear(dim, experts, bias=False)
        self.w_in = nn.Parameter(torch.randn(experts, hidden, dim) / dim ** 0.5)
        self.w_out = nn.Parameter(torch.randn(experts, dim, hidden) / hidden ** 0.5)

    def forward(self, x):
        h = x * self.norm
        gate = torch.softmax(self.router(h), dim=-1)                   # [tokens, experts]
        inner = torch.relu(torch.einsum("td,ehd->teh", h, self.w_in))  # every expert, dense
        out = torch.einsum("teh,edh->ted", inner, self.w_out)
        return x + torch.einsum("te,ted->td", gate, out)


class MoEModel(nn.Module):
    def __init__(self, vocab=64, dim=32, hidden=48, experts=4, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(MoELayer(dim, hidden, experts) for _ in range(layers))
        self.head_scale = nn.Parameter(torch.ones(1, dim))
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(x * self.head_scale)


def example_arguments(description):
    """The options the trainer and the inference side share."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--socket", required=True, help="the node's refitd socket")
    parser.add_argument("--out", required=True, help="folder for weights and hand-offs")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--first-version", type=int, default=1,
                        help="versions are numbered from this (the cluster's next version)")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--device", default="cpu",
                        help="where the model's tensors live: cpu (registered in shared "
                             "memory) or cuda:N (registered by CUDA IPC handle)")
    parser.add_argument("--allocated", action="store_true",
                        help="register memory refit allocates and copy the weights in and "
                             "out, instead of the model's own tensors in place")
    return parser


def register(daemon, role, rank, model_tensors, placement, allocated, **flags):
    """Registers `rank`: with `allocated`, memory refit allocates (shards, on the tensors'
    device); else the model's own tensors in place, as views of the rank's boxes."""
    shards = refit.torch_layout.shards_for(model_tensors, placement)
    register = daemon.register_source if role == "source" else daemon.register_destination
    if allocated:
        return register(rank, shards, device=str(next(iter(model_tensors.values())).device),
                        **flags)
    tensors = {name: model_tensors[name].detach()[box.slices()]
               for name, (box, _) in shards.items()}
    return register(rank, tensors=tensors, boxes={n: b for n, (b, _) in shards.items()}, **flags)


def trainer_placement(rank, ranks=2):
    """Expert parallel: rank r holds experts r*E/ranks.. and rows of embed and head; the
    router and norms are replicated on every trainer."""
    def place(name, shape):
        if name.endswith(("w_in", "w_out")) or name in ("embed.weight", "head.weight"):
            return refit.split(shape, 0, rank, ranks)
        return refit.replicated(shape)
    return place


def inference_placement(rank, ranks=2):
    """Tensor parallel: rank r holds a slice of every expert's hidden dimension and of the
    embedding columns; the router and norms are replicated."""
    def place(name, shape):
        if name.endswith("w_in"):
            return refit.split(shape, 1, rank, ranks)
        if name.endswith("w_out"):
            return refit.split(shape, 2, rank, ranks)
        if name in ("embed.weight", "head.weight"):
            return refit.split(shape, 1, rank, ranks)
        if name == "head_scale":
            return refit.chunk(shape, 0, rank, ranks)  # one row: the last ranks hold none
        return refit.replicated(shape)
    return place
