"""What the engine must answer: greedy tokens and their logprobs for fixed prompts from a
transformers forward of the model with the trainers' full weights of a version, and the
comparison of an engine's answers with them."""
from typing import List, Optional, Tuple

import psutil
import torch
from safetensors.torch import load_file
from transformers import AutoConfig, LlamaForCausalLM

PROMPTS = [[1, 17, 99, 230, 45, 8], [1] + list(range(40, 80)), [1, 300, 301, 302]]
NEW_TOKENS = 8
LOGPROB_TOLERANCE = 1e-3  # float32 throughout; vLLM's CPU kernels against torch's

Answer = Tuple[List[int], List[float]]  # one prompt's greedy tokens and their logprobs


def reference(model_dir: str, weights_file: Optional[str] = None) -> List[Answer]:
    """transformers' answers with the weights in `weights_file` (default: the model's)."""
    model = LlamaForCausalLM(AutoConfig.from_pretrained(model_dir)).eval()
    model.load_state_dict(load_file(weights_file or f"{model_dir}/model.safetensors"))
    answers = []
    with torch.no_grad():
        for prompt in PROMPTS:
            tokens, logprobs = list(prompt), []
            for _ in range(NEW_TOKENS):
                logits = model(input_ids=torch.tensor([tokens])).logits[0, -1]
                chosen = int(torch.argmax(logits))
                logprobs.append(float(torch.log_softmax(logits, -1)[chosen]))
                tokens.append(chosen)
            answers.append((tokens[len(prompt):], logprobs))
    return answers


def mismatch(got: Answer, expected: Answer) -> Optional[str]:
    """Why the engine's answer to one prompt is not the reference's; None when it is."""
    (tokens, logprobs), (want_tokens, want_logprobs) = got, expected
    if tokens != want_tokens:
        return f"greedy tokens {tokens}, the reference's {want_tokens}"
    worst = max(abs(a - b) for a, b in zip(logprobs, want_logprobs))
    if worst > LOGPROB_TOLERANCE:
        return f"logprobs differ by {worst:.2e} (engine {logprobs}, reference {want_logprobs})"
    return None


def check(label: str, got: List[Answer], expected: List[Answer]) -> None:
    """Fails the run, naming the prompt, unless every answer is the reference's."""
    for prompt, (answer, want) in enumerate(zip(got, expected)):
        why = mismatch(answer, want)
        if why is not None:
            raise SystemExit(f"{label}: prompt {prompt}: {why}")


def tree_rss(process: psutil.Process) -> int:
    """Resident bytes of a process and its children."""
    total = 0
    for p in [process] + process.children(recursive=True):
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total
