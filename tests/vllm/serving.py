"""vLLM's OpenAI server as its clients and its RL loop use it: a completion's greedy tokens
and their logprobs, and the routes that pause and resume generation."""
from typing import List, Tuple

import requests

from reference import NEW_TOKENS


def complete(url: str, model: str, prompt: List[int]) -> Tuple[List[int], List[float]]:
    """The server's greedy answer to `prompt` (token ids): its tokens and their logprobs."""
    reply = requests.post(f"{url}/v1/completions", timeout=180, json={
        "model": model, "prompt": prompt, "max_tokens": NEW_TOKENS, "temperature": 0,
        "logprobs": 0, "return_tokens_as_token_ids": True})
    reply.raise_for_status()
    logprobs = reply.json()["choices"][0]["logprobs"]
    return [int(t.split(":", 1)[1]) for t in logprobs["tokens"]], logprobs["token_logprobs"]


def post(url: str, route: str, params=None, **body) -> None:
    """POSTs to one of the server's routes; fails the run, naming it, unless it succeeds."""
    reply = requests.post(f"{url}{route}", json=body or None, params=params, timeout=180)
    if not reply.ok:
        raise SystemExit(f"POST {route}: {reply.status_code} {reply.text[:500]}")
