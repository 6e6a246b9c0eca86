"""A model server for tests and benchmarks, shaped as the ones people run: it
answers OpenAI chat completions (POST /v1/chat/completions: a JSON answer, or
with "stream": true an event stream whose last chunk carries the usage when
"stream_options": {"include_usage": true}), OpenAI's Responses API (POST
/v1/responses: JSON, or a stream ending with response.completed) and
Anthropic Messages (POST /v1/messages: JSON, or the event stream whose
message_start carries the input tokens and whose message_delta events carry
the output tokens counted so far). HTTP/1.1, in threads of the caller's
process:

    server = ModelServer()          # listening on server.port (server.address)
    ...
    server.stop()

The completion's size and what the server says of it come from request
headers (the gateway passes them on):

  X-Model-Tokens: N        completion tokens (default: a random 1-400); the
                           prompt's tokens are its content's bytes / 4
  X-Model-Usage: MODE      ok (default), missing (no usage anywhere), or a
                           lie put where the total goes: -1, string ("12"),
                           null, huge (1e309), digits (a number of 400 digits),
                           duplicate (a usage member twice, the last one true)
  X-Model-Chunking: awkward   every event written in two TCP writes cut in
                           its middle, and the usage's number cut in two
                           chunks; the JSON answer cut inside its numbers
  X-Model-Gzip: 1          gzip the body when the request's Accept-Encoding
                           allows it (a stream flushed per event)
  X-Model-Events: N        at most N content events in a stream (its usage is
                           still X-Model-Tokens: a bench's many completions)
  X-Model-Pad: N           pad each streamed event's text to N bytes (a
                           bench's 64 KiB stream: X-Model-Tokens 64, pad 1024)

  X-Model-Replay: FILE     a recorded answer from tests/fixtures/model_responses
                           sent as it is (.json whole, .sse an event per chunk)
  X-Model-Hostile: KIND    a body built to break a reader, X-Model-Bytes long:
                           long-json (a JSON string of that length before a
                           usage of 7 tokens), deep (objects nested that deep
                           around a usage), long-event (one event's data that
                           long, then an event with a usage of 7 tokens),
                           no-newline (an event stream without any newline)

`reported` lists the usage each answer reported (its total tokens, None for
none or a lie), noted as each answer starts; `requests` lists each
request's (path, headers, body) as it came.
"""

from __future__ import annotations

import gzip as gzip_module
import json
import os
import random
import socket
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REPLAYS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures",
                       "model_responses")
LIES = {"-1": "-1", "string": '"12"', "null": "null", "huge": "1e309", "digits": "9" * 400}


class ModelServer:
    def __init__(self, seed: int | None = None, keep_requests: bool = True):
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        self.reported: list[int | None] = []
        self.requests: list[tuple[str, dict, bytes]] = []
        self.keep_requests = keep_requests
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def setup(self):
                super().setup()
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_POST(self):
                try:
                    server._answer(self)
                except (ConnectionError, BrokenPipeError):
                    self.close_connection = True  # the client (the gateway) left

        class Server(ThreadingHTTPServer):
            request_queue_size = 256  # (5 by default: a burst of connections is refused)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.address = f"127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def reported_sum(self) -> int:
        with self.lock:
            return sum(r for r in self.reported if r is not None)

    # ---- One answer -----------------------------------------------------------------

    def _answer(self, h: BaseHTTPRequestHandler):
        if "chunked" in h.headers.get("Transfer-Encoding", "").lower():
            body = self._read_chunked(h)
        else:
            length = int(h.headers.get("Content-Length", "0"))
            body = h.rfile.read(length) if length else b""
        if self.keep_requests:
            with self.lock:
                self.requests.append((h.path, dict(h.headers.items()), body))
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            request = {}
        if not isinstance(request, dict):
            request = {}
        prompt = json.dumps(request.get("messages") or request.get("input") or "")
        prompt_tokens = max(1, len(prompt) // 4)
        with self.lock:
            tokens = int(h.headers.get("X-Model-Tokens") or self.random.randint(1, 400))
        mode = h.headers.get("X-Model-Usage", "ok")
        awkward = h.headers.get("X-Model-Chunking") == "awkward"
        gzipped = (h.headers.get("X-Model-Gzip") == "1" and
                   "gzip" in h.headers.get("Accept-Encoding", ""))
        pad = int(h.headers.get("X-Model-Pad", "0"))
        events_cap = int(h.headers.get("X-Model-Events", "0")) or None
        model = str(request.get("model", "test-model"))
        shape = {"/v1/chat/completions": "chat", "/v1/responses": "responses",
                 "/v1/messages": "messages"}.get(h.path.split("?")[0])
        if shape is None:
            return self._send_whole(h, 404, b'{"error":"no such model API"}', False)
        if h.headers.get("X-Model-Replay"):
            return self._replay(h, h.headers["X-Model-Replay"])
        if h.headers.get("X-Model-Hostile"):
            return self._send_hostile(h, h.headers["X-Model-Hostile"],
                                      int(h.headers.get("X-Model-Bytes", "1048576")))
        usage = None if mode != "ok" and mode != "duplicate" else prompt_tokens + tokens
        # Noted before the answer goes: a client that has read the answer finds it here.
        if request.get("stream"):
            include = shape != "chat" or (request.get("stream_options") or {}).get("include_usage")
            events = list(STREAMS[shape](model, prompt_tokens, tokens, mode if include else
                                         "missing", pad, events_cap))
            with self.lock:
                self.reported.append(usage if include else None)
            self._send_stream(h, events, awkward, gzipped)
        else:
            doc = WHOLE[shape](model, prompt_tokens, tokens, mode)
            with self.lock:
                self.reported.append(usage)
            self._send_whole(h, 200, doc.encode(), gzipped, awkward)

    @staticmethod
    def _read_chunked(h) -> bytes:
        body = bytearray()
        while True:
            size = int(h.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                while h.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return bytes(body)
            body += h.rfile.read(size)
            h.rfile.readline()

    def _send_whole(self, h, status, body: bytes, gzipped: bool, awkward: bool = False):
        if gzipped:
            body = gzip_module.compress(body)
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        if gzipped:
            h.send_header("Content-Encoding", "gzip")
        if not awkward:
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
            return
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        # Cut inside every number: a digit at a time around each.
        cuts = sorted({i for i, c in enumerate(body) if 48 <= c <= 57} | {len(body)})
        start = 0
        for cut in cuts:
            if cut > start:
                self._chunk(h, body[start:cut])
                start = cut
        self._chunk(h, b"")

    def _send_stream(self, h, events: list[bytes], awkward: bool, gzipped: bool):
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Cache-Control", "no-cache")
        if gzipped:
            h.send_header("Content-Encoding", "gzip")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        packer = zlib.compressobj(6, zlib.DEFLATED, 31) if gzipped else None
        for event in events:
            data = packer.compress(event) + packer.flush(zlib.Z_SYNC_FLUSH) if packer else event
            if not awkward:
                self._chunk(h, data)
                continue
            # The event in two chunks, each its own TCP write, cut in a number
            # when it has one (else in its middle).
            digits = [i for i, c in enumerate(data) if 48 <= c <= 57]
            cut = digits[len(digits) // 2] if digits and not packer else len(data) // 2
            self._chunk(h, data[:cut])
            time.sleep(0.001)  # shapes the TCP writes; waits for nothing
            self._chunk(h, data[cut:])
        if packer:
            self._chunk(h, packer.flush())
        self._chunk(h, b"")

    def _replay(self, h, name: str):
        """Sends a recorded answer (tests/fixtures/model_responses/NAME) as it is."""
        path = os.path.join(REPLAYS, os.path.basename(name))
        with open(path, "rb") as f:
            body = f.read()
        stream = name.endswith(".sse")
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream" if stream else "application/json")
        if stream:
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
            for event in body.split(b"\n\n"):
                if event:
                    self._chunk(h, event + b"\n\n")
            self._chunk(h, b"")
        else:
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
        with self.lock:
            self.reported.append(None)

    def _send_hostile(self, h, kind: str, n: int):
        usage = b'"usage":{"total_tokens":7,"prompt_tokens":7,"completion_tokens":0}'
        block = b"x" * (1 << 20)

        def filler(total):
            while total > 0:
                piece = block[:min(total, len(block))]
                self._chunk(h, piece)
                total -= len(piece)

        h.send_response(200)
        stream = kind in ("long-event", "no-newline")
        h.send_header("Content-Type", "text/event-stream" if stream else "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        if kind == "long-json":
            self._chunk(h, b'{"pad":"')
            filler(n)
            self._chunk(h, b'",' + usage + b"}")
        elif kind == "deep":
            self._chunk(h, b'{"a":' * n + b"{" + usage + b"}" + b"}" * n)
        elif kind == "long-event":
            self._chunk(h, b"data: ")
            filler(n)
            self._chunk(h, b"\n\ndata: {" + usage + b"}\n\n")
        else:
            self._chunk(h, b"data: {")
            filler(n)
        self._chunk(h, b"")
        with self.lock:
            self.reported.append(7 if kind == "long-event" else None)

    @staticmethod
    def _chunk(h, data: bytes):
        if data:
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        else:
            h.wfile.write(b"0\r\n\r\n")


# ---- The shapes --------------------------------------------------------------------------


def _usage_json(fields: list[tuple[str, int]], mode: str) -> str:
    """A usage object; with a lie, the last field's value is the lie."""
    values = [(k, str(v)) for k, v in fields]
    if mode in LIES:
        values[-1] = (values[-1][0], LIES[mode])
    return "{" + ",".join(f'"{k}":{v}' for k, v in values) + "}"


def _usage_member(fields, mode):
    if mode == "missing":
        return ""
    if mode == "duplicate":
        bigger = [(k, v * 1000) for k, v in fields]
        return f',"usage":{_usage_json(bigger, "ok")},"usage":{_usage_json(fields, "ok")}'
    return f',"usage":{_usage_json(fields, mode)}'


def chat_whole(model, prompt, tokens, mode):
    text = json.dumps("token " * tokens)
    return ('{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,'
            f'"model":{json.dumps(model)},"choices":[{{"index":0,"message":{{"role":"assistant",'
            f'"content":{text}}},"finish_reason":"stop"}}]' +
            _usage_member([("prompt_tokens", prompt), ("completion_tokens", tokens),
                           ("total_tokens", prompt + tokens)], mode) + "}")


def responses_whole(model, prompt, tokens, mode):
    text = json.dumps("token " * tokens)
    return ('{"id":"resp_1","object":"response","status":"completed",'
            f'"model":{json.dumps(model)},"output":[{{"type":"message","role":"assistant",'
            f'"content":[{{"type":"output_text","text":{text}}}]}}]' +
            _usage_member([("input_tokens", prompt), ("output_tokens", tokens),
                           ("total_tokens", prompt + tokens)], mode) + "}")


def messages_whole(model, prompt, tokens, mode):
    text = json.dumps("token " * tokens)
    return ('{"id":"msg_1","type":"message","role":"assistant",'
            f'"model":{json.dumps(model)},"content":[{{"type":"text","text":{text}}}],'
            '"stop_reason":"end_turn"' +
            _usage_member([("input_tokens", prompt), ("output_tokens", tokens)], mode) + "}")


def _sse(data: str, event: str | None = None) -> bytes:
    return ((f"event: {event}\n" if event else "") + f"data: {data}\n\n").encode()


def _text(i, pad):
    return json.dumps(("tok%d " % i).ljust(pad, "x") if pad else "tok%d " % i)


def chat_stream(model, prompt, tokens, mode, pad, cap=None):
    head = f'{{"id":"chatcmpl-1","object":"chat.completion.chunk","model":{json.dumps(model)},'
    for i in range(min(tokens, cap or tokens)):
        yield _sse(head + f'"choices":[{{"index":0,"delta":{{"content":{_text(i, pad)}}},'
                          '"finish_reason":null}],"usage":null}')
    if mode != "missing":
        yield _sse(head + '"choices":[]' +
                   _usage_member([("prompt_tokens", prompt), ("completion_tokens", tokens),
                                  ("total_tokens", prompt + tokens)], mode)[0:] + "}")
    yield _sse("[DONE]")


def responses_stream(model, prompt, tokens, mode, pad, cap=None):
    yield _sse('{"type":"response.created","response":{"id":"resp_1","status":"in_progress",'
               '"usage":null}}', "response.created")
    for i in range(min(tokens, cap or tokens)):
        yield _sse(f'{{"type":"response.output_text.delta","delta":{_text(i, pad)}}}',
                   "response.output_text.delta")
    usage = _usage_member([("input_tokens", prompt), ("output_tokens", tokens),
                           ("total_tokens", prompt + tokens)], mode)
    yield _sse(f'{{"type":"response.completed","response":{{"id":"resp_1",'
               f'"status":"completed"{usage}}}}}', "response.completed")


def messages_stream(model, prompt, tokens, mode, pad, cap=None):
    start_usage = "" if mode == "missing" else f',"usage":{{"input_tokens":{prompt},"output_tokens":1}}'
    yield _sse(f'{{"type":"message_start","message":{{"id":"msg_1","model":{json.dumps(model)}'
               f'{start_usage}}}}}', "message_start")
    yield _sse('{"type":"content_block_start","index":0,"content_block":{"type":"text",'
               '"text":""}}', "content_block_start")
    for i in range(min(tokens, cap or tokens)):
        yield _sse(f'{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta",'
                   f'"text":{_text(i, pad)}}}}}', "content_block_delta")
    yield _sse('{"type":"content_block_stop","index":0}', "content_block_stop")
    delta = _usage_member([("output_tokens", tokens)], mode)
    yield _sse(f'{{"type":"message_delta","delta":{{"stop_reason":"end_turn"}}{delta}}}',
               "message_delta")
    yield _sse('{"type":"message_stop"}', "message_stop")


WHOLE = {"chat": chat_whole, "responses": responses_whole, "messages": messages_whole}
STREAMS = {"chat": chat_stream, "responses": responses_stream, "messages": messages_stream}

# The usage expressions that read each shape (cost_from_response.body).
USAGE_PATHS = {
    "chat": ["usage.total_tokens"],
    "responses": ["usage.total_tokens", "response.usage.total_tokens"],
    "messages": ["usage.input_tokens + usage.output_tokens",
                 "message.usage.input_tokens + usage.output_tokens"],
}
