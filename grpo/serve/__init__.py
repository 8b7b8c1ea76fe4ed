"""The policy server: a token-level generation backend (the hf policy) behind a loopback HTTP
endpoint that agent harnesses, verifiers v1 environments and `vf-eval` can call.

    with PolicyServer(backend, model_name="grpo-policy", limits=ServeLimits()) as server:
        server.url            # http://127.0.0.1:<port>; clients use server.url + "/v1"

Routes (grpo/serve/protocol.py has the exact bodies):
- POST /inference/v1/generate: vLLM's tokens-in/tokens-out contract (token_ids + sampling_params
  in; token ids, per-token logprobs as "token_id:<id>" and a finish reason out). verifiers'
  training client (TrainClientConfig) calls it.
- POST /v1/chat/completions: OpenAI chat completions (text out, no tools, n = 1).
- GET /v1/models (with max_model_len), GET /health.

Concurrent requests are batched (grpo/serve/batcher.py): the worker collects requests for a few ms,
then makes one backend call per group of requests that sample alike. `python -m grpo.serve` runs
it as a command of its own (grpo/serve/__main__.py). Importing this package is light (no torch).
"""

from grpo.serve.batcher import Batcher
from grpo.serve.protocol import BadRequest, ServeLimits
from grpo.serve.server import PolicyServer

__all__ = ["BadRequest", "Batcher", "PolicyServer", "ServeLimits"]
