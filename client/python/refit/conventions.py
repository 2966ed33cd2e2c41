"""The layouts frameworks use for dense Llama/Qwen-style models, as refit boxes and
views, by Hugging Face tensor names (`model.layers.N.self_attn.q_proj.weight`, ...).

Megatron-style tensor parallelism (the trainer): column-parallel linears (q, k, v, gate,
up) split their output rows, row-parallel ones (o, down) their input columns, the
embedding and the output head their vocabulary rows; norms are replicated.

vLLM-style tensor parallelism (the engine), as vLLM's LlamaForCausalLM holds it (its
`stacked_params_mapping`; FusedMoE's `_load_w13`, which puts w1 (gate) in the first half
of an expert's w13 rows and w3 (up) in the second, each TP rank taking an equal slice;
read in vLLM's main branch, December 2026): the same splits, with q, k and v fused into
one `qkv_proj.weight` (this rank's q rows, then its k rows, then its v rows) and gate and
up into `gate_up_proj.weight`; mixture-of-experts layers as vLLM's FusedMoE holds them
(`mlp.experts.w13_weight` [experts, 2 x intermediate, hidden]: each expert's gate rows,
then its up rows; `mlp.experts.w2_weight` [experts, hidden, intermediate]: its down
projection), the intermediate dimension split by TP, or with expert parallelism whole
experts, rank r holding the r-th contiguous range (vLLM's linear expert placement).
`vllm_views` maps the engine's parameters to the model's tensors as views into them, so
refitd writes the fused parameters in place. Also as vLLM does it: KV heads replicated when
the TP size exceeds them (`kv_heads`: rank r holds KV head r // (tp / kv_heads), vLLM's
`num_kv_head_replicas`), q/k/v biases fused like their weights (Qwen2), and the vocabulary
padded to a multiple of 64 (vLLM's `pad_vocab_size`, DEFAULT_VOCAB_PADDING_SIZE) before it
is split: rank r's embedding and head hold rows [r * P, (r + 1) * P) of the padded
vocabulary, P = padded / tp, and only the real rows among them are the model's (refit
writes those; vLLM's weight loader zeroes the rest once, and they stay so). DeepSeek's MLA
attention as vLLM's DeepseekV2 holds it: `fused_qkv_a_proj.weight` = q_a_proj rows, then
kv_a_proj_with_mqa rows, whole on every TP rank; q_b_proj and kv_b_proj split by rows,
o_proj by columns. Not covered: vocabularies with added (LoRA) tokens."""
import re

from .errors import RefitInvalidInput
from .shards import Box, chunk, replicated

_COLUMN = re.compile(r"\.(q_proj|q_b_proj|kv_b_proj|gate_proj|up_proj)\.(weight|bias)$")
_KV_COLUMN = re.compile(r"\.(k_proj|v_proj)\.(weight|bias)$")
_ROW = re.compile(r"\.(o_proj|down_proj)\.weight$")
_STACKED_UP = re.compile(r"\.mlp\.experts\.(w_gate|w_up)$")  # [E, mi, h]
_STACKED_DOWN = re.compile(r"\.mlp\.experts\.w_down$")       # [E, h, mi]
_LAYER = re.compile(r"^model\.layers\.(\d+)\.")
_VOCAB = ("model.embed_tokens.weight", "lm_head.weight")

# vLLM's fused parameters: engine suffix -> the model's tensors it holds, in row order.
# (the same suffixes under any module: `mlp.` and `mlp.shared_experts.` alike; routed
# experts are fused by the rules below instead)
_FUSED = {".qkv_proj.weight": (".q_proj.weight", ".k_proj.weight", ".v_proj.weight"),
          ".qkv_proj.bias": (".q_proj.bias", ".k_proj.bias", ".v_proj.bias"),
          ".gate_up_proj.weight": (".gate_proj.weight", ".up_proj.weight"),
          ".fused_qkv_a_proj.weight": (".q_a_proj.weight", ".kv_a_proj_with_mqa.weight")}
# Fused parameters every TP rank holds whole (DeepSeek MLA's latent projections: vLLM's
# MergedColumnParallelLinear with disable_tp).
_REPLICATED_FUSED = (".fused_qkv_a_proj.weight",)
_VOCAB_PADDING = 64  # vLLM's DEFAULT_VOCAB_PADDING_SIZE


# vLLM's stacked experts: engine suffix -> the HF projections it holds, per expert.
_W13, _W2 = "mlp.experts.w13_weight", "mlp.experts.w2_weight"


def _expert_name(prefix, expert, projection):
    return f"{prefix}mlp.experts.{expert}.{projection}.weight"


def megatron_box(name, global_shape, tp_rank, tp_size, ep_rank=0, ep_size=1, etp_rank=None,
                 etp_size=1, kv_heads=None) -> Box:
    """The box of HF tensor `name` that a rank holds: tensor-parallel rank `tp_rank` of
    `tp_size` for dense weights (column-parallel split rows, row-parallel columns, the
    vocabulary split by rows, the rest replicated; k and v with `kv_heads` below the TP
    size: one KV head per rank group, as vLLM replicates them), and for stacked routed
    experts (`mlp.experts.w_gate`, `w_up` [E, mi, h], `w_down` [E, h, mi]) expert rank
    `ep_rank` of `ep_size` along dim 0 with `etp_size`-way TP inside an expert."""
    shape = tuple(global_shape)
    box = replicated(shape)
    if _STACKED_UP.search(name) or _STACKED_DOWN.search(name):
        box = box.chunked(0, ep_rank, ep_size)
        inner = 1 if _STACKED_UP.search(name) else 2
        return box.chunked(inner, tp_rank if etp_rank is None else etp_rank, etp_size)
    if _KV_COLUMN.search(name) and kv_heads is not None and tp_size > kv_heads:
        head_dim = shape[0] // kv_heads
        head = tp_rank * kv_heads // tp_size
        return Box(shape, (head * head_dim,) + (0,) * (len(shape) - 1),
                   (head_dim,) + shape[1:])
    if _COLUMN.search(name) or _KV_COLUMN.search(name) or name in _VOCAB:
        return box.chunked(0, tp_rank, tp_size)
    if _ROW.search(name):
        return box.chunked(1, tp_rank, tp_size)
    return box


def _stage_of_layer(layer, layers, pp):
    """Megatron's pipeline stages: contiguous layer ranges, earlier stages take the
    remainder."""
    base, extra = divmod(layers, pp)
    big = extra * (base + 1)
    return layer // (base + 1) if layer < big else extra + (layer - big) // base


def megatron_rank_boxes(global_shapes, rank, tp=1, pp=1, ep=1, dp=1, etp=1, kv_heads=None):
    """HF name -> Box of every tensor Megatron training rank `rank` holds (none of it: left
    out), ranks ordered TP fastest, then EP, then DP, then PP: layers in contiguous
    pipeline stages, the embedding on the first stage, the final norm and the head on the
    last; routed experts split over EP with `etp`-way TP inside an expert (TP 1 unless
    given)."""
    tp_rank, ep_rank, pp_rank = rank % tp, rank // tp % ep, rank // (tp * ep * dp)
    if not 0 <= rank < tp * ep * dp * pp:
        raise RefitInvalidInput(f"rank {rank} is not one of the {tp * ep * dp * pp} ranks of "
                                f"tp={tp} pp={pp} ep={ep} dp={dp}")
    if tp % etp:
        raise RefitInvalidInput(f"etp={etp} must divide tp={tp}")
    layers = 1 + max((int(m.group(1)) for m in map(_LAYER.match, global_shapes) if m),
                     default=-1)
    if pp > max(layers, 1):
        raise RefitInvalidInput(f"pp={pp} exceeds the {layers} layers")
    boxes = {}
    for name, shape in global_shapes.items():
        layer = _LAYER.match(name)
        if layer:
            here = _stage_of_layer(int(layer.group(1)), layers, pp) == pp_rank
        elif name == "model.embed_tokens.weight":
            here = pp_rank == 0
        else:  # model.norm, lm_head
            here = pp_rank == pp - 1
        if not here:
            continue
        box = megatron_box(name, shape, tp_rank, tp, ep_rank, ep, tp_rank % etp, etp, kv_heads)
        if not box.empty:
            boxes[name] = box
    return boxes


def vllm_rank_boxes(global_shapes, rank, tp=1, dp=1, ep=1, kv_heads=None):
    """HF name -> Box of every tensor vLLM inference rank `rank` holds (ranks TP fastest,
    then DP): the dense rules of `megatron_box`; routed experts TP-sharded inside every
    expert, or with `ep` > 1 split whole along dim 0 (expert rank = rank % ep)."""
    if not 0 <= rank < tp * dp:
        raise RefitInvalidInput(f"rank {rank} is not one of the {tp * dp} ranks of tp={tp} dp={dp}")
    tp_rank = rank % tp
    ep_rank, etp_rank, etp = (rank % ep, 0, 1) if ep > 1 else (0, tp_rank, tp)
    boxes = {}
    for name, shape in global_shapes.items():
        box = megatron_box(name, shape, tp_rank, tp, ep_rank, ep, etp_rank, etp, kv_heads)
        if not box.empty:
            boxes[name] = box
    return boxes


def _even(name, size, tp_size):
    if size % tp_size:
        raise RefitInvalidInput(f"{name}: {size} rows do not split evenly over TP {tp_size} (KV "
                                f"heads fewer than the TP size: give kv_heads=, and vLLM "
                                f"replicates them)")


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
                raise RefitInvalidInput(f"{engine_name}: holds {name}, which the model does not "
                                        f"have")
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
            raise RefitInvalidInput(f"{engine_name}: {param.shape[1]} rows per expert, but gate "
                                    f"and up take {row}")


def vllm_vocab_box(name, global_shape, tp_rank, tp_size, padding=_VOCAB_PADDING):
    """The box of the embedding or output head that vLLM's TP rank `tp_rank` holds, and
    the rows of its parameter: the vocabulary padded to a multiple of `padding`, split
    evenly; the box is the real rows among this rank's (maybe none). Returns (box, rows)."""
    shape = tuple(global_shape)
    padded = -(-shape[0] // padding) * padding
    if padded % tp_size:
        raise RefitInvalidInput(f"{name}: the padded vocabulary of {padded} rows does not split "
                                f"over TP {tp_size}")
    rows = padded // tp_size
    start = min(tp_rank * rows, shape[0])
    real = min(rows, shape[0] - start)
    return Box(shape, (start,) + (0,) * (len(shape) - 1), (real,) + shape[1:]), rows


def _vllm_box(name, shape, tp_rank, tp_size, kv_heads):
    """The box of one of the parts of a fused parameter (q, k, v, gate, up) on a TP rank."""
    if _KV_COLUMN.search(name) and kv_heads is not None and tp_size > kv_heads:
        if tp_size % kv_heads:
            raise RefitInvalidInput(f"{name}: TP {tp_size} is not a multiple of its {kv_heads} KV "
                                    f"heads (vLLM replicates each head over tp / kv_heads ranks)")
        return megatron_box(name, shape, tp_rank, tp_size, kv_heads=kv_heads)
    _even(name, shape[0], tp_size)
    return chunk(shape, 0, tp_rank, tp_size)


def vllm_views(engine_params, global_shapes, tp_rank, tp_size, ep_rank=None, kv_heads=None):
    """The engine's parameters (`engine_params`: vLLM's names -> this TP rank's tensors)
    as the model's tensors: returns (tensors, boxes), HF name -> a view into the engine's
    parameter and its box of the global tensor (`global_shapes`: HF name -> shape). With
    `ep_rank`, experts are expert parallel (this rank holds whole experts ep_rank * E_local
    onward) instead of split by TP. `kv_heads`: the model's KV heads, needed when the TP
    size exceeds them (vLLM replicates them)."""
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
                raise RefitInvalidInput(f"{engine_name}: the model has no tensor of that name")
            shape = tuple(global_shapes[engine_name])
            if engine_name in _VOCAB:
                box, rows = vllm_vocab_box(engine_name, shape, tp_rank, tp_size)
                if param.shape[0] != rows:
                    raise RefitInvalidInput(f"{engine_name}: {param.shape[0]} rows on TP rank "
                                            f"{tp_rank}, but vLLM pads the vocabulary of "
                                            f"{shape[0]} to {rows} rows per rank")
                tensors[engine_name], boxes[engine_name] = param[:box.extent[0]], box
                continue
            box = megatron_box(engine_name, shape, tp_rank, tp_size)
            tensors[engine_name], boxes[engine_name] = param, box
            continue
        row = 0
        for part in fused:
            name = prefix + part
            if name not in global_shapes:
                raise RefitInvalidInput(f"{engine_name}: holds {name}, which the model does not "
                                        f"have")
            shape = tuple(global_shapes[name])
            box = (replicated(shape) if engine_name.endswith(_REPLICATED_FUSED)
                   else _vllm_box(name, shape, tp_rank, tp_size, kv_heads))
            tensors[name], boxes[name] = param[row:row + box.extent[0]], box
            row += box.extent[0]
        if row != param.shape[0]:
            raise RefitInvalidInput(f"{engine_name}: {param.shape[0]} rows, but its parts take "
                                    f"{row} on TP rank {tp_rank} of {tp_size}")
    return tensors, boxes


_EXPERT = re.compile(r"^(.*)mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


def fuse_like_vllm(full, tp_rank, tp_size, ep_rank=None, ep_size=1, kv_heads=None):
    """What vLLM holds on TP rank `tp_rank` for the full HF tensors `full` (name -> torch
    tensor): engine name -> tensor, fused the engine's way (with `ep_rank`, experts split
    whole over `ep_size` ranks; KV heads replicated past `kv_heads`; the vocabulary padded,
    its padding rows zero). The reference the tests compare the engine's parameters with,
    written from the conventions above, not from refit."""
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
        if name in _VOCAB:
            box, rows = vllm_vocab_box(name, tensor.shape, tp_rank, tp_size)
            padded = torch.zeros((rows,) + tuple(tensor.shape[1:]), dtype=tensor.dtype)
            padded[:box.extent[0]] = tensor[box.slices()]
            engine[name] = padded
        elif name not in fused_parts:
            engine[name] = tensor[megatron_box(name, tensor.shape, tp_rank, tp_size).slices()]
    for suffix, parts in _FUSED.items():
        prefixes = sorted({n[:-len(parts[0])] for n in full
                           if n.endswith(parts[0]) and not _EXPERT.match(n)})
        for prefix in prefixes:
            pieces = []
            for p in parts:
                tensor = full[prefix + p]
                box = (replicated(tensor.shape) if suffix in _REPLICATED_FUSED else
                       megatron_box(prefix + p, tensor.shape, tp_rank, tp_size,
                                    kv_heads=kv_heads))
                pieces.append(tensor[box.slices()])
            engine[prefix + suffix] = torch.cat(pieces, dim=0)
    return engine
