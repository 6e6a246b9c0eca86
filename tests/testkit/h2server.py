"""A plain HTTP/2 (h2c, prior knowledge) upstream for tests, on python3-h2, in
threads of the test's process: each request is answered, once its stream has
ended, with 200, a JSON body of what arrived ({"headers": [[name, value]...],
"trailers": [...], "body_bytes": n, "data_frames": [length...], "ended_by":
"headers" | "data" | "empty data" | "trailers", "reads": n}) and the trailer
"x-upstream-trailer: done". "ended_by" says which frame carried END_STREAM
("empty data": a DATA frame of no bytes after the body); "reads" counts the
socket reads that brought the stream's frames.

    server = H2Upstream()      # listening on server.port
    ...
    server.stop()

H2Upstream(mute=True) is a server that stops answering: it reads the client's
first bytes (the preface, SETTINGS, perhaps a request), answers with its own
SETTINGS, then neither reads nor writes again while the connection stays open.

H2Upstream(body_bytes=N) answers every request with 200 and N bytes ("x"),
sent as the client's flow-control windows allow.

H2Upstream(hold=S) answers each request S seconds after its stream ended,
unless it is reset first: `resets` lists the error codes of the RST_STREAM
frames received, `held` counts the requests being held now.

H2Upstream(max_streams=N) advertises SETTINGS_MAX_CONCURRENT_STREAMS N and,
as nghttp2 and most servers do, answers a stream opened beyond N at once with
RST_STREAM REFUSED_STREAM (counted in `refused`); `most_open` is the most
streams it ever had open at once on one connection.

Setting `refuse_next` = N makes it refuse its next N streams (REFUSED_STREAM,
counted in `refused`) whatever its limit; `goaway_next` = N makes each of its
next N requests get a GOAWAY naming no stream as processed (a server going
away before it looked at anything), its connection then closed.

Setting `fail_next` = N answers its next N requests, once their streams have
ended, with `fail_status` (503) and no body, or, with `fail_grpc` set, with a
gRPC Trailers-Only answer whose grpc-status is 14 (UNAVAILABLE); the body
bytes each failed request brought are appended to `failed_bodies`.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
import hyperframe.frame


class H2Upstream:
    def __init__(self, mute: bool = False, body_bytes: int | None = None, hold: float = 0.0,
                 max_streams: int | None = None):
        self.mute = mute
        self.max_streams = max_streams
        self.refused = 0
        self.most_open = 0
        self.refuse_next = 0
        self.goaway_next = 0
        self.fail_next = 0
        self.fail_status = 503
        self.fail_grpc = False
        self.failed_bodies: list[int] = []
        self.body_bytes = body_bytes
        self.hold = hold
        self.held = 0
        self.resets: list[int] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.stopped = threading.Event()
        self.connections = 0
        self.requests = 0  # request heads received
        self.sent_body_bytes = 0  # of the body_bytes responses
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def stop(self):
        self.stopped.set()
        self.listener.close()
        self.thread.join(5)

    def _accept(self):
        self.listener.settimeout(0.2)
        while not self.stopped.is_set():
            try:
                sock, _ = self.listener.accept()
            except OSError:
                continue
            self.connections += 1
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket):
        conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        if self.max_streams is not None:
            # Advertised in the SETTINGS frame, then lifted inside h2 (which
            # would end the connection instead): this server refuses streams itself.
            limit = h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS
            conn.local_settings = h2.settings.Settings(
                client=False, initial_values={limit: self.max_streams})
            conn.initiate_connection()
            conn.local_settings = h2.settings.Settings(
                client=False, initial_values={limit: 2**31 - 1})
        else:
            conn.initiate_connection()
        sock.sendall(conn.data_to_send())
        open_streams: set[int] = set()  # max_streams: opened and not yet answered
        refused: set[int] = set()  # max_streams: the streams it refused
        streams: dict[int, dict] = {}
        unsent: dict[int, int] = {}  # body_bytes: what each stream still has to send
        held: dict[int, tuple[float, dict]] = {}  # hold: when each stream is answered
        going_away = False  # goaway_next: its GOAWAY went, nothing more is answered
        reads = 0  # socket reads that brought data
        with sock:
            while not self.stopped.is_set():
                sock.settimeout(0.02 if held else 0.5)
                try:
                    data = sock.recv(65536)
                except socket.timeout:
                    data = None
                except OSError:
                    self.held -= len(held)
                    return
                if data == b"":
                    self.held -= len(held)
                    return
                events = conn.receive_data(data) if data else []
                reads += 1 if data else 0
                if data is None and not held:
                    continue
                if self.mute:
                    try:
                        sock.sendall(conn.data_to_send())
                    except OSError:
                        return
                    self.stopped.wait()
                    return
                if going_away:
                    continue  # read until the client closes
                for event in events:
                    if getattr(event, "stream_id", None) in refused:
                        continue  # the rest of a refused stream's frames
                    if isinstance(event, h2.events.RequestReceived) and self.goaway_next > 0:
                        self.goaway_next -= 1
                        going_away = True
                        break
                    if isinstance(event, h2.events.RequestReceived) and self.refuse_next > 0:
                        self.refuse_next -= 1
                        self.refused += 1
                        refused.add(event.stream_id)
                        conn.reset_stream(event.stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
                        continue
                    if isinstance(event, h2.events.RequestReceived) and self.max_streams is not None:
                        if len(open_streams) >= self.max_streams:
                            self.refused += 1
                            refused.add(event.stream_id)
                            conn.reset_stream(event.stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
                            continue
                        open_streams.add(event.stream_id)
                        self.most_open = max(self.most_open, len(open_streams))
                    stream = streams.get(getattr(event, "stream_id", None))
                    if stream is not None and stream["read_at"] != reads:
                        stream["read_at"] = reads
                        stream["reads"] += 1
                    if isinstance(event, h2.events.RequestReceived):
                        self.requests += 1
                        streams[event.stream_id] = {"headers": [list(h) for h in event.headers],
                                                    "trailers": [], "body_bytes": 0,
                                                    "data_frames": [], "reads": 1,
                                                    "read_at": reads,
                                                    "ended_by": "headers"}
                    elif isinstance(event, h2.events.DataReceived):
                        streams[event.stream_id]["body_bytes"] += len(event.data)
                        streams[event.stream_id]["data_frames"].append(len(event.data))
                        if event.stream_ended is not None:
                            streams[event.stream_id]["ended_by"] = \
                                "data" if event.data else "empty data"
                        conn.acknowledge_received_data(event.flow_controlled_length,
                                                       event.stream_id)
                    elif isinstance(event, h2.events.TrailersReceived):
                        streams[event.stream_id]["trailers"] = [list(h) for h in event.headers]
                        streams[event.stream_id]["ended_by"] = "trailers"
                    elif isinstance(event, h2.events.StreamReset):
                        open_streams.discard(event.stream_id)
                        unsent.pop(event.stream_id, None)
                        self.resets.append(event.error_code)
                        if held.pop(event.stream_id, None):
                            self.held -= 1
                    elif isinstance(event, h2.events.StreamEnded) and self.fail_next > 0:
                        self.fail_next -= 1
                        open_streams.discard(event.stream_id)
                        self.failed_bodies.append(streams.pop(event.stream_id)["body_bytes"])
                        if self.fail_grpc:
                            answer = [(":status", "200"), ("content-type", "application/grpc"),
                                      ("grpc-status", "14"), ("grpc-message", "down")]
                        else:
                            answer = [(":status", str(self.fail_status)),
                                      ("content-length", "0")]
                        conn.send_headers(event.stream_id, answer, end_stream=True)
                    elif isinstance(event, h2.events.StreamEnded) and self.hold:
                        held[event.stream_id] = (time.monotonic() + self.hold,
                                                 streams.pop(event.stream_id))
                        self.held += 1
                    elif isinstance(event, h2.events.StreamEnded) and self.body_bytes is not None:
                        streams.pop(event.stream_id)
                        conn.send_headers(event.stream_id, [(":status", "200")])
                        unsent[event.stream_id] = self.body_bytes
                    elif isinstance(event, h2.events.StreamEnded):
                        open_streams.discard(event.stream_id)
                        seen = streams.pop(event.stream_id)
                        seen.pop("read_at")
                        body = json.dumps(seen).encode()
                        conn.send_headers(event.stream_id, [
                            (":status", "200"), ("content-type", "application/json")])
                        conn.send_data(event.stream_id, body)
                        conn.send_headers(event.stream_id, [("x-upstream-trailer", "done")],
                                          end_stream=True)
                now = time.monotonic()
                for stream_id in [i for i, (due, _) in held.items() if due <= now]:
                    _, seen = held.pop(stream_id)
                    seen.pop("read_at")
                    self.held -= 1
                    open_streams.discard(stream_id)
                    conn.send_headers(stream_id, [(":status", "200"),
                                                  ("content-type", "application/json")])
                    conn.send_data(stream_id, json.dumps(seen).encode(), end_stream=True)
                self._send_what_fits(conn, unsent)
                try:
                    sock.sendall(conn.data_to_send())
                    if going_away:
                        sock.sendall(hyperframe.frame.GoAwayFrame(0, last_stream_id=0).serialize())
                except OSError:
                    return

    def _send_what_fits(self, conn, unsent: dict[int, int]):
        """The body_bytes responses, as far as the windows let them go."""
        for stream_id in list(unsent):
            left = unsent[stream_id]
            room = min(conn.local_flow_control_window(stream_id), left)
            while room > 0:
                n = min(room, conn.max_outbound_frame_size)
                conn.send_data(stream_id, b"x" * n)
                self.sent_body_bytes += n
                room -= n
                left -= n
            if left == 0:
                conn.end_stream(stream_id)
                del unsent[stream_id]
            else:
                unsent[stream_id] = left
