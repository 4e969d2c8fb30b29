"""An OpenAI-compatible chat endpoint on 127.0.0.1, for tests and benchmarks.

Any agent can sit behind it: the request's `model` is an agent spec (for example
`scripted:dealnodeal/boulware`), and when the client sends the observation along (the `openai:`
backend's `observation=true` test hook) that agent plays the move, so real games run over HTTP.
Without an observation it answers with a fixed move.

Faults are injected at chosen rates: 429 with Retry-After, 500, a hang past the client's
timeout, malformed JSON, empty content; plus a fixed latency, counted from a request's arrival
to its answer. `required_key` makes every request with another key fail with 401.

    with serve(make_app(Faults(latency_ms=50, p_429=0.1))) as base_url: ...
    python -m ibrl_bench.testing.fake_openai --port 8011 --latency-ms 50
"""


import argparse
import asyncio
import contextlib
import json
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

FIXED_MOVE = "I would like the books. <propose>book=1 hat=0 ball=0</propose>"


class Faults(BaseModel):
    latency_ms: float = 0.0
    p_429: float = 0.0
    retry_after_s: float = 0.01
    p_500: float = 0.0
    p_hang: float = 0.0
    hang_s: float = 5.0
    p_malformed: float = 0.0
    p_empty: float = 0.0
    seed: int = 0
    first_429: int = 0  # the first N requests get a 429 with Retry-After, whatever the rates
    required_key: str | None = None
    echo_key: bool = False  # put the caller's key into the reply, to prove it is scrubbed


def make_app(faults: Faults | None = None):
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response

    from ibrl_bench.agents.spec import build_agent
    from ibrl_bench.domains.base import Observation

    faults = faults or Faults()
    rng = random.Random(faults.seed)
    agents: dict[tuple[str, str], Any] = {}
    app = FastAPI()
    app.state.requests = 0
    app.state.faults_served = 0
    app.state.inflight = 0
    app.state.max_inflight = 0

    def json_response(body: dict) -> Response:
        # Serialised here: FastAPI walks a returned dict through jsonable_encoder in Python
        # first, which a body of plain strings and numbers does not need.
        return Response(json.dumps(body), media_type="application/json")

    def error(status: int, message: str, headers: dict[str, str] | None = None):
        body = {"error": {"message": message, "type": "fake", "code": status}}
        return JSONResponse(body, status_code=status, headers=headers)

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        app.state.requests += 1
        app.state.inflight += 1
        app.state.max_inflight = max(app.state.max_inflight, app.state.inflight)
        try:
            return await answer(request)
        finally:
            app.state.inflight -= 1

    async def answer(request):
        # The injected latency runs from the request's arrival to the answer, the endpoint's own
        # work included, as a real server's latency does: this process's CPU (parsing, the agent's
        # move, the reply's JSON) is the test rig's, not part of the latency being modelled.
        due = time.monotonic() + faults.latency_ms / 1000
        response = await reply(request)
        if faults.latency_ms:
            await asyncio.sleep(max(0.0, due - time.monotonic()))
        return response

    async def reply(request):
        key = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        body = await request.json()
        if faults.required_key is not None and key != faults.required_key:
            return error(401, f"Incorrect API key provided: {key}")
        if app.state.requests <= faults.first_429:
            app.state.faults_served += 1
            return error(429, "rate limited", {"retry-after": str(faults.retry_after_s)})
        roll = rng.random()
        fault = None
        for p, kind in ((faults.p_429, "429"), (faults.p_500, "500"), (faults.p_hang, "hang"),
                        (faults.p_malformed, "malformed"), (faults.p_empty, "empty")):
            if roll < p:
                fault = kind
                break
            roll -= p
        if fault:
            app.state.faults_served += 1
        if fault == "429":
            return error(429, "rate limited", {"retry-after": str(faults.retry_after_s)})
        if fault == "500":
            return error(500, "internal error")
        if fault == "hang":
            await asyncio.sleep(faults.hang_s)
        if fault == "malformed":
            return Response('{"id": "x", "choices": [', media_type="application/json")

        text = FIXED_MOVE
        obs = body.get("ibrl_observation")
        if obs is not None:
            o = Observation.model_validate(obs)
            spec = body.get("model", "")
            agent = agents.get((spec, o.domain))
            if agent is None:
                agent = agents[(spec, o.domain)] = build_agent(spec, o.domain).agent
            text = (await agent.act(o)).text
        if fault == "empty":
            text = ""
        if faults.echo_key:
            text = f"{text} (key {key})"
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
        return json_response({
            "id": f"fake-{app.state.requests}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", ""),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(text.split()),
                      "total_tokens": prompt_tokens + len(text.split())},
        })

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": "fake", "object": "model"}]}

    return app


@contextlib.contextmanager
def serve(app, host: str = "127.0.0.1") -> Iterator[str]:
    """Run `app` with uvicorn in a thread on a free port; yield its base URL; stop it after."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=0, log_level="error", access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the fake endpoint did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def main() -> None:
    import uvicorn

    ap = argparse.ArgumentParser(description="OpenAI-compatible fake endpoint on 127.0.0.1")
    ap.add_argument("--port", type=int, default=8011)
    ap.add_argument("--latency-ms", type=float, default=0.0)
    # auto: httptools and uvloop where installed (the dev extra installs them), which costs the
    # endpoint about 0.9 ms of CPU per call where h11 on asyncio's loop costs about 1.5 ms.
    ap.add_argument("--http", default="auto", help="uvicorn's HTTP parser: auto, h11, httptools")
    ap.add_argument("--loop", default="auto", help="uvicorn's event loop: auto, asyncio, uvloop")
    args = ap.parse_args()
    uvicorn.run(make_app(Faults(latency_ms=args.latency_ms)), host="127.0.0.1", port=args.port,
                log_level="error", access_log=False, http=args.http, loop=args.loop)


if __name__ == "__main__":
    main()
