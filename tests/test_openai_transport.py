"""The openai: backend's transport (the openai client over aiohttp, raw responses read by us)
against a scripted HTTP server that misbehaves in ways a real endpoint does: dropping the
connection, answering too late, answering with a body that is not a chat completion."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time

import pytest

pytest.importorskip("openai")
pytest.importorskip("aiohttp")

from ibrl_bench.agents import openai_api  # noqa: E402
from ibrl_bench.agents.openai_api import MalformedResponse, parse_completion  # noqa: E402
from ibrl_bench.agents.spec import build_agent  # noqa: E402
from ibrl_bench.domains import get_domain  # noqa: E402
from ibrl_bench.errors import FatalAgentError  # noqa: E402

OK = {"choices": [{"index": 0, "finish_reason": "stop",
                   "message": {"role": "assistant", "content": "I want the books."}}],
      "usage": {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15}}


def http(status: int, body: bytes, headers: dict[str, str] | None = None) -> bytes:
    head = [f"HTTP/1.1 {status} X", "Content-Type: application/json", f"Content-Length: {len(body)}",
            "Connection: close"]
    head += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


@contextlib.contextmanager
def scripted(*answers: bytes | str):
    """A server on 127.0.0.1 that answers the n-th request with answers[n] (the last one
    repeats): raw HTTP bytes, "drop" (close without a word) or "hang" (never answer)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    seen: list[float] = []
    stop = threading.Event()

    def read_request(conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length"))
        while len(body) < length:
            body += conn.recv(65536)

    def answer(conn: socket.socket) -> None:
        with conn:
            read_request(conn)
            seen.append(time.monotonic())
            answer = answers[min(len(seen), len(answers)) - 1]
            if answer == "hang":
                stop.wait(3)
            elif answer != "drop":
                conn.sendall(answer)

    def serve() -> None:
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            threading.Thread(target=answer, args=(conn,), daemon=True).start()  # a hang holds only its own

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1", seen
    finally:
        stop.set()
        thread.join(5)
        sock.close()


def act(url: str, extra: str = ""):
    game = get_domain("dealnodeal")
    state = game.start(game.scenario_set("dev", 1).scenarios[0], 0)
    agent = build_agent(f"openai:m@{url}?key_env=none&timeout=1&backoff=0.01&max_backoff=0.02{extra}",
                        "dealnodeal").agent

    async def once():
        try:
            return await agent.act(game.observe(state, game.to_move(state)[0]))
        finally:
            await agent.aclose()

    return asyncio.run(once())


def test_a_dropped_connection_is_retried():
    with scripted("drop", "drop", http(200, json.dumps(OK).encode())) as (url, seen):
        reply = act(url)
    assert reply.text == "I want the books." and len(seen) == 3
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (11, 4)


def test_a_request_past_its_timeout_is_retried():
    with scripted("hang", http(200, json.dumps(OK).encode())) as (url, seen):
        start = time.perf_counter()
        reply = act(url, "&timeout=0.3")
    assert reply.text == "I want the books." and len(seen) == 2
    assert 0.3 <= time.perf_counter() - start < 2.5


@pytest.mark.parametrize("bad", [b'{"id": "x", "choices": [', b'{"id": "x"}', b'[1, 2]',
                                 b'{"choices": [{"message": {"content": 7}}]}'])
def test_a_body_that_is_not_a_chat_completion_is_retried(bad):
    with scripted(http(200, bad), http(200, json.dumps(OK).encode())) as (url, seen):
        reply = act(url)
    assert reply.text == "I want the books." and len(seen) == 2


def test_malformed_on_every_attempt_fails_the_move_not_the_run():
    with scripted(http(200, b'{"id": "x"}')) as (url, seen):
        with pytest.raises(MalformedResponse):
            act(url, "&max_attempts=2")
    assert len(seen) == 2


def test_retry_after_is_honoured_through_the_transport():
    limited = http(429, b'{"error": {"message": "slow down"}}', {"Retry-After": "0.3"})
    with scripted(limited, http(200, json.dumps(OK).encode())) as (url, seen):
        reply = act(url)
    assert reply.text and len(seen) == 2
    assert seen[1] - seen[0] >= 0.28, "the retry waited for Retry-After, not the 10 ms backoff"


def test_not_found_stops_the_run_in_one_line():
    with scripted(http(404, b'{"error": {"message": "no such model"}}')) as (url, seen):
        with pytest.raises(FatalAgentError) as e:
            act(url)
    assert "404" in str(e.value) and "\n" not in str(e.value) and len(seen) == 1


def test_without_aiohttp_the_default_transport_still_plays(monkeypatch):
    monkeypatch.setattr(openai_api, "http_clients", lambda: [None] * openai_api.CLIENT_SHARDS)
    with scripted("drop", http(200, json.dumps(OK).encode())) as (url, seen):
        reply = act(url)
    assert reply.text == "I want the books." and len(seen) == 2


def test_parse_completion_reads_text_tokens_and_finish_reason():
    done = parse_completion(json.dumps(OK).encode())
    assert (done.text, done.prompt_tokens, done.completion_tokens, done.finish_reason) == (
        "I want the books.", 11, 4, "stop")
    assert parse_completion(b'{"choices": []}').text is None  # empty: the retry layer judges it
    no_usage = parse_completion(b'{"choices": [{"message": {"content": "hi"}}]}')
    assert (no_usage.text, no_usage.prompt_tokens, no_usage.completion_tokens) == ("hi", 0, 0)
    with pytest.raises(ValueError):
        parse_completion(b"not json")
