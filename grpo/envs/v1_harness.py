"""grpo's own harness for verifiers v1 episodes: a tool-less chat loop run in-process.

verifiers' `null` harness runs its program through `uv` (the package index, at setup); this one
makes the same calls from the event loop that runs the episode: one chat completion per segment,
sent to the episode's interception endpoint with its secret, so verifiers records the turn (and,
with the training client, its tokens) exactly as for any harness. A segment resumed by the user
(a scripted user's turn) relaunches on the whole conversation (verifiers' default `resume`).

verifiers loads a harness by id (an importable module exporting one Harness subclass); grpo
registers this module under the id `grpo_chat` (grpo/envs/verifiers_v1.py) and pins it on every
role of a v1 environment. Tools are not passed to the model (grpo's rollouts have none).
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import aiohttp
import verifiers.v1 as vf
from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.runtimes import ProgramResult

HARNESS_ID = "grpo_chat"
# one HTTP session per event loop (a session is bound to its loop). An httpx client cost ~30 ms
# of the loop's time to make, and its connection pool polls every idle connection on each
# request; aiohttp's connector does neither, which made an episode's turns measurably cheaper
_SESSIONS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aiohttp.ClientSession] = (
    weakref.WeakKeyDictionary()
)


def _session() -> aiohttp.ClientSession:
    loop = asyncio.get_running_loop()
    session = _SESSIONS.get(loop)
    if session is None or session.closed:
        # no read timeout: the episode's own deadline (env.timeout_s) bounds the call
        session = _SESSIONS[loop] = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, connect=10.0),
            connector=aiohttp.TCPConnector(limit=0),
        )
    return session


async def close_session() -> None:
    """Close this loop's session (its owner calls it on the loop before stopping it)."""
    session = _SESSIONS.pop(asyncio.get_running_loop(), None)
    if session is not None and not session.closed:
        await session.close()


class GrpoChatHarnessConfig(vf.HarnessConfig):
    id: str = HARNESS_ID


class GrpoChatHarness(vf.Harness[GrpoChatHarnessConfig]):
    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(
        self,
        ctx: Any,
        trace: Any,
        runtime: Any,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: Any,
    ) -> ProgramResult:
        system_prompt, prompt = self.resolve_prompt(data)
        messages: list[dict[str, Any]] = (
            [{"role": "system", "content": system_prompt}] if system_prompt else []
        )
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        elif prompt:
            messages.extend(message_to_wire(m) for m in prompt)
        async with _session().post(
            endpoint.rstrip("/") + "/chat/completions",
            json={"model": ctx.model, "messages": messages},
            headers={"Authorization": f"Bearer {secret}"},
        ) as reply:
            text = await reply.text()
        if reply.status >= 400:
            return ProgramResult(1, "", f"chat completion failed: HTTP {reply.status}: {text[:500]}")
        return ProgramResult(0, "", "")


__all__ = ["GrpoChatHarness"]
