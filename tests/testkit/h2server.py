"""A plain HTTP/2 (h2c, prior knowledge) upstream for tests, on python3-h2, in
threads of the test's process: each request is answered, once its stream has
ended, with 200, a JSON body of what arrived ({"headers": [[name, value]...],
"trailers": [...], "body_bytes": n}) and the trailer "x-upstream-trailer: done".

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
"""

from __future__ import annotations

import json
import socket
import threading
import time

import h2.config
import h2.connection
import h2.events


class H2Upstream:
    def __init__(self, mute: bool = False, body_bytes: int | None = None, hold: float = 0.0):
        self.mute = mute
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
        conn.initiate_connection()
        sock.sendall(conn.data_to_send())
        streams: dict[int, dict] = {}
        unsent: dict[int, int] = {}  # body_bytes: what each stream still has to send
        held: dict[int, tuple[float, dict]] = {}  # hold: when each stream is answered
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
                if data is None and not held:
                    continue
                if self.mute:
                    try:
                        sock.sendall(conn.data_to_send())
                    except OSError:
                        return
                    self.stopped.wait()
                    return
                for event in events:
                    if isinstance(event, h2.events.RequestReceived):
                        self.requests += 1
                        streams[event.stream_id] = {"headers": [list(h) for h in event.headers],
                                                    "trailers": [], "body_bytes": 0}
                    elif isinstance(event, h2.events.DataReceived):
                        streams[event.stream_id]["body_bytes"] += len(event.data)
                        conn.acknowledge_received_data(event.flow_controlled_length,
                                                       event.stream_id)
                    elif isinstance(event, h2.events.TrailersReceived):
                        streams[event.stream_id]["trailers"] = [list(h) for h in event.headers]
                    elif isinstance(event, h2.events.StreamReset):
                        unsent.pop(event.stream_id, None)
                        self.resets.append(event.error_code)
                        if held.pop(event.stream_id, None):
                            self.held -= 1
                    elif isinstance(event, h2.events.StreamEnded) and self.hold:
                        held[event.stream_id] = (time.monotonic() + self.hold,
                                                 streams.pop(event.stream_id))
                        self.held += 1
                    elif isinstance(event, h2.events.StreamEnded) and self.body_bytes is not None:
                        streams.pop(event.stream_id)
                        conn.send_headers(event.stream_id, [(":status", "200")])
                        unsent[event.stream_id] = self.body_bytes
                    elif isinstance(event, h2.events.StreamEnded):
                        body = json.dumps(streams.pop(event.stream_id)).encode()
                        conn.send_headers(event.stream_id, [
                            (":status", "200"), ("content-type", "application/json")])
                        conn.send_data(event.stream_id, body)
                        conn.send_headers(event.stream_id, [("x-upstream-trailer", "done")],
                                          end_stream=True)
                now = time.monotonic()
                for stream_id in [i for i, (due, _) in held.items() if due <= now]:
                    _, seen = held.pop(stream_id)
                    self.held -= 1
                    conn.send_headers(stream_id, [(":status", "200"),
                                                  ("content-type", "application/json")])
                    conn.send_data(stream_id, json.dumps(seen).encode(), end_stream=True)
                self._send_what_fits(conn, unsent)
                try:
                    sock.sendall(conn.data_to_send())
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
