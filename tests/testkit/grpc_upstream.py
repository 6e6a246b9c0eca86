"""A gRPC server for tests, on python3-grpcio with generic handlers (raw
bytes, no protoc): run as a process of its own, it prints "listening PORT"
once it serves. Plain (h2c) or TLS (--cert/--key; --client-ca asks for a
client certificate).

Methods of test.Echo (the request is raw bytes):
  Unary         the request back; initial metadata "x-seen-<name>" for each
                request metadata key starting with "x-" and for
                "x-forwarded-for"; trailing metadata "x-usage": the request's
                length, and "x-deadline-ms": the time the call had left (or
                "none")
  ServerStream  the request's decimal count of messages, each "message N"
  ClientStream  every request message joined
  Bidi          each request message back as it arrives, upper-cased
  Fail          ends with NOT_FOUND, "no such thing", trailing "x-why: test"
  Slow          waits for the request's decimal seconds, then answers "late"
                (printing "slow call started" as it begins)
  Big           a message of the request's decimal size in bytes
  Chunks        "N:SIZE": N messages of SIZE bytes
"""

import argparse
import sys
import threading
import time
from concurrent import futures

import grpc


def _identity(b):
    return b


def unary(request, context):
    seen = []
    for key, value in context.invocation_metadata():
        if key.startswith("x-"):
            seen.append((f"x-seen-{key}", value))
    context.send_initial_metadata(tuple(seen))
    remaining = context.time_remaining()
    deadline = "none" if remaining is None else str(int(remaining * 1000))
    context.set_trailing_metadata((("x-usage", str(len(request))), ("x-deadline-ms", deadline)))
    return request


def server_stream(request, context):
    for i in range(int(request.decode() or "0")):
        yield f"message {i}".encode()


def client_stream(request_iterator, context):
    return b"".join(request_iterator)


def bidi(request_iterator, context):
    for message in request_iterator:
        yield message.upper()


def fail(request, context):
    context.set_trailing_metadata((("x-why", "test"),))
    context.abort(grpc.StatusCode.NOT_FOUND, "no such thing")


def slow(request, context):
    print("slow call started", flush=True)
    end = time.monotonic() + float(request.decode() or "0")
    while time.monotonic() < end and context.is_active():
        time.sleep(0.02)
    return b"late"


def big(request, context):
    return b"x" * int(request.decode() or "0")


def chunks(request, context):
    count, size = (int(x) for x in request.decode().split(":"))
    for _ in range(count):
        if not context.is_active():
            return
        yield b"c" * size


def handlers():
    kw = {"request_deserializer": _identity, "response_serializer": _identity}
    return grpc.method_handlers_generic_handler("test.Echo", {
        "Unary": grpc.unary_unary_rpc_method_handler(unary, **kw),
        "ServerStream": grpc.unary_stream_rpc_method_handler(server_stream, **kw),
        "ClientStream": grpc.stream_unary_rpc_method_handler(client_stream, **kw),
        "Bidi": grpc.stream_stream_rpc_method_handler(bidi, **kw),
        "Fail": grpc.unary_unary_rpc_method_handler(fail, **kw),
        "Slow": grpc.unary_unary_rpc_method_handler(slow, **kw),
        "Big": grpc.unary_unary_rpc_method_handler(big, **kw),
        "Chunks": grpc.unary_stream_rpc_method_handler(chunks, **kw),
    })


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--client-ca")
    parser.add_argument("--workers", type=int, default=16)
    args = parser.parse_args()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=args.workers),
                         options=[("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers((handlers(),))
    address = f"127.0.0.1:{args.port}"
    if args.cert:
        with open(args.cert, "rb") as f:
            cert = f.read()
        with open(args.key, "rb") as f:
            key = f.read()
        ca = None
        if args.client_ca:
            with open(args.client_ca, "rb") as f:
                ca = f.read()
        credentials = grpc.ssl_server_credentials(((key, cert),), root_certificates=ca,
                                                  require_client_auth=ca is not None)
        port = server.add_secure_port(address, credentials)
    else:
        port = server.add_insecure_port(address)
    if port == 0:
        print("cannot listen", file=sys.stderr)
        return 1
    server.start()
    print(f"listening {port}", flush=True)
    stop = threading.Event()
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    server.stop(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
