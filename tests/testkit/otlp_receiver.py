"""An OTLP/HTTP trace receiver for tests (POST /v1/traces), in threads of the
caller's process. It decodes each export request by the OTLP specification's
JSON encoding and refuses, with 400 and a note in `errors`, anything that
breaks it:

  - Content-Type application/json, a JSON object with "resourceSpans";
  - every resource's and span's attributes a list of {"key", "value"} whose
    value is an AnyValue with exactly one of stringValue, boolValue,
    intValue (an int64 as a decimal string), doubleValue, arrayValue;
  - traceId 32 and spanId / parentSpanId 16 lower-case hex digits, not all
    zero; kind 0-5; startTimeUnixNano and endTimeUnixNano int64 decimal
    strings, the end not before the start; status.code 0-2.

    receiver = OtlpReceiver()       # receiver.url: http://127.0.0.1:PORT/v1/traces
    receiver.behave("status", 503, retry_after="1")   # or "ok", "slow", "close", "hold"
    ...
    receiver.stop()

`spans` lists every accepted span as a dict: its fields as decoded, its
attributes as a plain {key: value} mapping ("attributes"), and the resource's
the same way ("resource"). `posts` counts requests, whatever was answered.
"""

from __future__ import annotations

import json
import re
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HEX32 = re.compile(r"^[0-9a-f]{32}$")
HEX16 = re.compile(r"^[0-9a-f]{16}$")
INT64 = re.compile(r"^-?[0-9]{1,19}$")


class OtlpError(ValueError):
    pass


def _any_value(value):
    if not isinstance(value, dict) or len(value) != 1:
        raise OtlpError(f"an AnyValue has exactly one field: {value!r}")
    (kind, v), = value.items()
    if kind == "stringValue" and isinstance(v, str):
        return v
    if kind == "boolValue" and isinstance(v, bool):
        return v
    if kind == "intValue" and isinstance(v, str) and INT64.match(v):
        return int(v)
    if kind == "doubleValue" and isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if kind == "arrayValue" and isinstance(v, dict) and isinstance(v.get("values"), list):
        return [_any_value(x) for x in v["values"]]
    raise OtlpError(f"not an AnyValue: {value!r}")


def _attributes(items) -> dict:
    if not isinstance(items, list):
        raise OtlpError("attributes must be a list")
    out = {}
    for item in items:
        if set(item) != {"key", "value"} or not isinstance(item["key"], str) or not item["key"]:
            raise OtlpError(f"an attribute is {{key, value}}: {item!r}")
        if item["key"] in out:
            raise OtlpError(f"attribute {item['key']} given twice")
        out[item["key"]] = _any_value(item["value"])
    return out


def _nanos(span, field) -> int:
    v = span.get(field)
    if not isinstance(v, str) or not INT64.match(v) or int(v) <= 0:
        raise OtlpError(f"{field} must be an int64 decimal string: {v!r}")
    return int(v)


def decode_export(body: bytes) -> list[dict]:
    """The spans of an ExportTraceServiceRequest in OTLP JSON, or OtlpError."""
    doc = json.loads(body)
    if not isinstance(doc, dict) or not isinstance(doc.get("resourceSpans"), list):
        raise OtlpError("no resourceSpans list")
    spans = []
    for rs in doc["resourceSpans"]:
        resource = _attributes(rs.get("resource", {}).get("attributes", []))
        for ss in rs.get("scopeSpans", []):
            scope = ss.get("scope", {})
            if not isinstance(scope.get("name", ""), str):
                raise OtlpError("scope.name must be a string")
            for span in ss.get("spans", []):
                for field, pattern in (("traceId", HEX32), ("spanId", HEX16)):
                    v = span.get(field)
                    if not isinstance(v, str) or not pattern.match(v) or set(v) == {"0"}:
                        raise OtlpError(f"bad {field}: {v!r}")
                parent = span.get("parentSpanId", "")
                if parent and not HEX16.match(parent):
                    raise OtlpError(f"bad parentSpanId: {parent!r}")
                if not isinstance(span.get("name"), str) or not span["name"]:
                    raise OtlpError("a span needs a name")
                if span.get("kind", 0) not in range(6):
                    raise OtlpError(f"bad kind {span.get('kind')!r}")
                start, end = _nanos(span, "startTimeUnixNano"), _nanos(span, "endTimeUnixNano")
                if end < start:
                    raise OtlpError("a span ends before it starts")
                status = span.get("status", {})
                if status.get("code", 0) not in (0, 1, 2):
                    raise OtlpError(f"bad status {status!r}")
                spans.append({**span, "start": start, "end": end, "parent": parent,
                              "attributes": _attributes(span.get("attributes", [])),
                              "resource": resource, "scope": scope})
    return spans


class OtlpReceiver:
    def __init__(self, tls: tuple[str, str] | None = None):
        """tls: (certificate file, key file) to serve HTTPS."""
        self.lock = threading.Lock()
        self.spans: list[dict] = []
        self.errors: list[str] = []
        self.posts = 0
        self.headers: list[dict] = []
        self.mode: tuple = ("ok",)
        self.release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                receiver._post(self)

        class Server(ThreadingHTTPServer):
            request_queue_size = 128

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        scheme = "https" if tls else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def behave(self, mode: str, *args, **kwargs):
        """ok; status CODE [retry_after=S] (then ok once `times` answers were
        given, default: always); slow SECONDS; close (reads half the body,
        then closes); hold (waits until release is set)."""
        with self.lock:
            self.mode = (mode, args, kwargs)

    def stop(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def spans_of(self, trace_id: str) -> list[dict]:
        with self.lock:
            return [s for s in self.spans if s["traceId"] == trace_id]

    def _post(self, h: BaseHTTPRequestHandler):
        with self.lock:
            self.posts += 1
            mode, args, kwargs = (self.mode + ((), {}))[:3]
            self.headers.append(dict(h.headers))
        length = int(h.headers.get("Content-Length", "0"))
        if mode == "close":
            h.rfile.read(length // 2)
            h.connection.shutdown(socket.SHUT_RDWR)
            h.close_connection = True
            return
        body = h.rfile.read(length)
        if mode == "slow":
            time.sleep(args[0])
        if mode == "hold":
            self.release.wait(30)
        if mode == "status":
            times = kwargs.get("times")
            if times is not None:
                with self.lock:
                    if times <= 1:
                        self.mode = ("ok",)
                    else:
                        self.mode = ("status", args, {**kwargs, "times": times - 1})
            extra = {"Retry-After": kwargs["retry_after"]} if "retry_after" in kwargs else {}
            return self._answer(h, args[0], b'{"error":"refused"}', extra)
        if h.headers.get("Content-Type", "").split(";")[0].strip() != "application/json":
            return self._refuse(h, f"content type {h.headers.get('Content-Type')!r}")
        try:
            spans = decode_export(body)
        except (OtlpError, ValueError) as e:
            return self._refuse(h, f"{e} in {body[:4000]!r}")
        with self.lock:
            self.spans.extend(spans)
        self._answer(h, 200, b"{}")

    def _refuse(self, h, why: str):
        with self.lock:
            self.errors.append(why)
        self._answer(h, 400, json.dumps({"error": why}).encode())

    @staticmethod
    def _answer(h, status: int, body: bytes, extra: dict | None = None):
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        for name, value in (extra or {}).items():
            h.send_header(name, value)
        h.end_headers()
        h.wfile.write(body)
