"""The layouts frameworks use for dense Llama/Qwen-style models, as refit boxes and
views, by Hugging Face tensor names (`model.layers.N.self_attn.q_proj.weight`, ...).

Megatron-style tensor parallelism (the trainer): column-parallel linears (q, k, v, gate,
up) split their output rows, row-parallel ones (o, down) their input columns, the
embedding and the output head their vocabulary rows; norms are replicated.

vLLM-style tensor parallelism (the engine), as vLLM's LlamaForCausalLM holds it (its
`stacked_params_mapping`, vLLM 0.6 to 0.11): the same splits, with q, k and v fused into
one `qkv_proj.weight` (this rank's q rows, then its k rows, then its v rows) and gate and
up into `gate_up_proj.weight`; mixture-of-experts layers as vLLM's FusedMoE holds them
(`mlp.experts.w13_weight` [experts, 2 x intermediate, hidden]: each expert's gate rows,
then its up rows; `mlp.experts.w2_weight` [experts, hidden, intermediate]: its down
projection), the intermediate dimension split by TP, or with expert parallelism whole
experts, rank r holding the r-th contiguous range (vLLM's linear expert placement).
`vllm_views` maps the engine's parameters to the model's tensors as views into them, so
refitd writes the fused parameters in place. Supported here: KV heads divisible by the TP
size (no KV-head replication) and a vocabulary that the TP size divides (no vocabulary
padding)."""
import re

from .shards import Box, chunk, replicated

_COLUMN = re.compile(r"\.(q_proj|k_proj|v_proj|gate_proj|up_proj)\.weight$")
_ROW = re.compile(r"\.(o_proj|down_proj)\.weight$")
_VOCAB = ("model.embed_tokens.weight", "lm_head.weight")

# vLLM's fused parameters: engine suffix -> the model's tensors it holds, in row order.
_FUSED = {"self_attn.qkv_proj.weight": ("self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                        "self_attn.v_proj.weight"),
          "mlp.gate_up_proj.weight": ("mlp.gate_proj.weight", "mlp.up_proj.weight")}


# vLLM's stacked experts: engine suffix -> the HF projections it holds, per expert.
_W13, _W2 = "mlp.experts.w13_weight", "mlp.experts.w2_weight"


def _expert_name(prefix, expert, projection):
    return f"{prefix}mlp.experts.{expert}.{projection}.weight"


def megatron_box(name, global_shape, tp_rank, tp_size) -> Box:
    """The box of HF tensor `name` that Megatron tensor-parallel rank `tp_rank` holds."""
    shape = tuple(global_shape)
    if _COLUMN.search(name) or name in _VOCAB:
        return chunk(shape, 0, tp_rank, tp_size)
    if _ROW.search(name):
        return chunk(shape, 1, tp_rank, tp_size)
    return replicated(shape)


def _even(name, size, tp_size):
    if size % tp_size:
        raise ValueError(f"{name}: {size} rows do not split evenly over TP {tp_size} (vLLM "
                         f"would replicate KV heads or pad the vocabulary; not supported)")


def _expert_views(engine_name, param, global_shapes, tp_rank, tp_size, ep_rank, tensors,
                  boxes):
    """Views of a stacked-experts parameter (w13 or w2) as each expert's HF tensors."""
    w13 = engine_name.endswith(_W13)
    prefix = engine_name[:-len(_W13 if w13 else _W2)]
    experts = param.shape[0]
    first = ep_rank * experts if ep_rank is not None else 0
    for local in range(experts):
        expert = first + local
        row = 0
        for projection in (("gate_proj", "up_proj") if w13 else ("down_proj",)):
            name = _expert_name(prefix, expert, projection)
            if name not in global_shapes:
                raise KeyError(f"{engine_name}: holds {name}, which the model does not have")
            shape = tuple(global_shapes[name])
            split = 0 if w13 else 1  # gate/up split their rows, down its columns
            _even(name, shape[split], tp_size)
            box = (chunk(shape, split, tp_rank, tp_size) if ep_rank is None
                   else replicated(shape))
            if w13:
                tensors[name] = param[local, row:row + box.extent[0]]
                row += box.extent[0]
            else:
                tensors[name] = param[local]
            boxes[name] = box
        if w13 and row != param.shape[1]:
            raise ValueError(f"{engine_name}: {param.shape[1]} rows per expert, but gate and "
                             f"up take {row}")


def vllm_views(engine_params, global_shapes, tp_rank, tp_size, ep_rank=None):
    """The engine's parameters (`engine_params`: vLLM's names -> this TP rank's tensors)
    as the model's tensors: returns (tensors, boxes), HF name -> a view into the engine's
    parameter and its box of the global tensor (`global_shapes`: HF name -> shape). With
    `ep_rank`, experts are expert parallel (this rank holds whole experts ep_rank * E_local
    onward) instead of split by TP."""
    tensors, boxes = {}, {}
    for engine_name, param in engine_params.items():
        if engine_name.endswith((_W13, _W2)):
            _expert_views(engine_name, param, global_shapes, tp_rank, tp_size, ep_rank,
                          tensors, boxes)
            continue
        prefix, fused = None, None
        for suffix, parts in _FUSED.items():
            if engine_name.endswith(suffix):
                prefix, fused = engine_name[:-len(suffix)], parts
        if fused is None:
            if engine_name not in global_shapes:
                raise KeyError(f"{engine_name}: the model has no tensor of that name")
            shape = tuple(global_shapes[engine_name])
            box = megatron_box(engine_name, shape, tp_rank, tp_size)
            if engine_name in _VOCAB:
                _even(engine_name, shape[0], tp_size)
            tensors[engine_name], boxes[engine_name] = param, box
            continue
        row = 0
        for part in fused:
            name = prefix + part
            if name not in global_shapes:
                raise KeyError(f"{engine_name}: holds {name}, which the model does not have")
            shape = tuple(global_shapes[name])
            _even(name, shape[0], tp_size)
            box = chunk(shape, 0, tp_rank, tp_size)
            tensors[name], boxes[name] = param[row:row + box.extent[0]], box
            row += box.extent[0]
        if row != param.shape[0]:
            raise ValueError(f"{engine_name}: {param.shape[0]} rows, but its parts take {row} "
                             f"on TP rank {tp_rank} of {tp_size}")
    return tensors, boxes


_EXPERT = re.compile(r"^(.*)mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


def fuse_like_vllm(full, tp_rank, tp_size, ep_rank=None, ep_size=1):
    """What vLLM holds on TP rank `tp_rank` for the full HF tensors `full` (name -> torch
    tensor): engine name -> tensor, fused the engine's way (with `ep_rank`, experts split
    whole over `ep_size` ranks). The reference the tests compare the engine's parameters
    with, written from the conventions above, not from refit."""
    import torch

    engine = {}
    experts = {}  # layer prefix -> number of experts
    for name in full:
        match = _EXPERT.match(name)
        if match:
            experts[match.group(1)] = max(experts.get(match.group(1), 0), int(match.group(2)) + 1)
    for prefix, count in experts.items():
        local = range(count) if ep_rank is None else range(
            ep_rank * count // ep_size, (ep_rank + 1) * count // ep_size)

        def cut(name, dim):
            tensor = full[name]
            return tensor if ep_rank is not None else \
                tensor[chunk(tensor.shape, dim, tp_rank, tp_size).slices()]
        engine[prefix + _W13] = torch.stack([torch.cat(
            [cut(_expert_name(prefix, e, "gate_proj"), 0),
             cut(_expert_name(prefix, e, "up_proj"), 0)], dim=0) for e in local])
        engine[prefix + _W2] = torch.stack(
            [cut(_expert_name(prefix, e, "down_proj"), 1) for e in local])
    fused_parts = {n for n in full
                   if _EXPERT.match(n) or
                   any(n.endswith(p) for parts in _FUSED.values() for p in parts)}
    for name, tensor in full.items():
        if name not in fused_parts:
            engine[name] = tensor[megatron_box(name, tensor.shape, tp_rank, tp_size).slices()]
    for suffix, parts in _FUSED.items():
        prefixes = sorted({n[:-len(parts[0])] for n in full if n.endswith(parts[0])})
        for prefix in prefixes:
            engine[prefix + suffix] = torch.cat(
                [full[prefix + p][chunk(full[prefix + p].shape, 0, tp_rank, tp_size).slices()]
                 for p in parts], dim=0)
    return engine
