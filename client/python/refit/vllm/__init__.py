"""refit as a vLLM weight-transfer backend, by name: `"backend": "refit"`.

    pip install refit          # beside vLLM; its plugin entry point registers the backend
    vllm serve MODEL --weight-transfer-config '{"backend": "refit"}'
    LLM(MODEL, weight_transfer_config={"backend": "refit"})

then, per version: `init_weight_transfer_engine({"init_info": {"socket": REFITD_SOCKET}})`
once, and `start_weight_update()`, `update_weights({"update_info": {"version": v}})` while
refit moves version v (`refitctl refit --version v`, or `refit.RefitClient.refit`),
`finish_weight_update()`, and a reset of the prefix cache (refit.vllm.engine says why).

This module imports nothing from vLLM until vLLM calls `register` (in every vLLM process:
the front end, the engine core and each worker)."""

BACKEND = "refit"


def register() -> None:
    """vLLM's `vllm.general_plugins` entry point: makes the "refit" backend known to
    vLLM's weight-transfer factories, the workers' and the trainers' (once per process;
    vLLM may call it again). A trainer process calls it itself."""
    from vllm.distributed.weight_transfer import (WeightTransferEngineFactory,
                                                  WeightTransferTrainerFactory)

    if BACKEND not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine(BACKEND, "refit.vllm.engine",
                                                    "RefitWeightTransferEngine")
    if BACKEND not in WeightTransferTrainerFactory._registry:
        WeightTransferTrainerFactory.register_engine(BACKEND, "refit.vllm.trainer",
                                                     "RefitTrainerWeightTransferEngine")
