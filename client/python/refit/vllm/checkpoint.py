"""The checkpoint tensors a vLLM model was started from: their names, shapes and dtypes,
read from the headers of its `*.safetensors` files (no tensor data is read). They name the
tensors trainers publish (the model's Hugging Face names)."""
import os
from typing import Dict, Tuple

import torch

from ..errors import RefitInvalidInput

# safetensors' dtype names, as its headers spell them.
_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}
if hasattr(torch, "float8_e4m3fn"):
    _DTYPES["F8_E4M3"] = torch.float8_e4m3fn


def checkpoint_specs(model_dir: str) -> Dict[str, Tuple[Tuple[int, ...], torch.dtype]]:
    """name -> (shape, dtype) of every tensor in the `*.safetensors` files of `model_dir`."""
    from safetensors import safe_open

    if not os.path.isdir(model_dir):
        raise RefitInvalidInput(f"refit's vLLM backend: the model {model_dir!r} is not a local "
                                f"folder: it reads the checkpoint's tensor names from there")
    files = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
    if not files:
        raise RefitInvalidInput(f"refit's vLLM backend: {model_dir} holds no *.safetensors file "
                                f"to read the checkpoint's tensor names from")
    specs = {}
    for file_name in files:
        with safe_open(os.path.join(model_dir, file_name), framework="pt") as checkpoint:
            for name in checkpoint.keys():
                part = checkpoint.get_slice(name)
                dtype_name = part.get_dtype()
                if dtype_name not in _DTYPES:
                    raise RefitInvalidInput(f"refit's vLLM backend: checkpoint tensor {name} in "
                                            f"{file_name} is {dtype_name}, a dtype refit does "
                                            f"not move")
                specs[name] = (tuple(part.get_shape()), _DTYPES[dtype_name])
    return specs
