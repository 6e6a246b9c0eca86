"""Sluice's Python testkit (standard library only): what the integration tests,
scripts/bench and loadtest/ share to start a stack on loopback and talk to it.

One module each: ports (free loopback ports), procfs (/proc figures of a PID),
processes (child processes stopped by PID: redis-server, sluice-echo, sluice),
cluster and sentinel (a real Redis Cluster and a real Sentinel set on loopback),
configs (YAML configs), resp (a RESP client), http (HTTP clients, down to raw
bytes), websocket (a WebSocket echo upstream that can misbehave on purpose, and a
WebSocket client) and metrics (the Prometheus text parser). `python3 -m testkit` is a small
command line for shell scripts (see __main__.py).
"""
