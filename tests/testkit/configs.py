"""Gateway configs for tests and benchmarks: written as YAML from plain dicts,
or taken from a file whose loopback addresses are moved to ports of our own.

to_yaml() writes block-style YAML of nested dicts and lists of scalars;
gateway_config() is a minimal config on ephemeral 127.0.0.1 ports; listen_ports()
reads the listeners back from YAML text. retarget() and set_limit() edit the text
of a hand-written config (conf/sluice.yaml, loadtest/conf/loadtest.yaml) without
a YAML library: each edit must match exactly once.
"""

from __future__ import annotations

import json
import re

from .ports import free_port

def _yaml_scalar(value) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))  # a JSON string is a valid double-quoted YAML scalar


def to_yaml(value, indent: int = 0) -> str:
    """Block-style YAML for nested dicts/lists of scalars (enough for configs)."""
    pad = " " * indent
    lines = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{pad}{key}:")
                lines.append(to_yaml(item, indent + 2))
            elif isinstance(item, (dict, list)):
                lines.append(f"{pad}{key}: {'{}' if isinstance(item, dict) else '[]'}")
            else:
                lines.append(f"{pad}{key}: {_yaml_scalar(item)}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict) and item:
                body = to_yaml(item, indent + 2).split("\n")
                lines.append(f"{pad}- {body[0].lstrip()}")
                lines.extend(body[1:])
            elif isinstance(item, list) and item:
                lines.append(f"{pad}- {json.dumps(item)}")
            else:
                lines.append(f"{pad}- {_yaml_scalar(item)}")
    else:
        lines.append(pad + _yaml_scalar(value))
    return "\n".join(lines)


def gateway_config(upstreams: dict, routes: list, server: dict | None = None,
                   port: int | None = None, admin_port: int | None = None,
                   **sections) -> dict:
    """A config dict listening on 127.0.0.1 ephemeral ports.

    upstreams: name -> list of "host:port" strings, or name -> full dict.
    routes: list of route dicts; `limits: []` is filled in when missing.
    server: extra server keys. sections: other top-level sections (log, redis...).
    """
    config = {
        "server": {
            "listen": f"127.0.0.1:{port or free_port()}",
            "threads": 2,
            **(server or {}),
        },
        "admin": {"listen": f"127.0.0.1:{admin_port or free_port()}"},
        "log": {"level": "warn", "access_log": True},
    }
    config.update(sections)
    config["upstreams"] = {
        name: ({"servers": list(spec)} if isinstance(spec, (list, tuple)) else spec)
        for name, spec in upstreams.items()}
    config["routes"] = [{**route, "limits": route.get("limits", [])} for route in routes]
    return config


def listen_ports(config_text: str) -> tuple[int, int]:
    """(data port, admin port) from the first `listen:` keys of server and admin."""
    ports = {}
    section = None
    for line in config_text.splitlines():
        top = re.match(r"^([A-Za-z_]\w*):", line)
        if top:
            section = top.group(1)
            continue
        m = re.match(r"^\s+listen:\s*[\"']?[^\"'\s]*:(\d+)", line)
        if m and section in ("server", "admin") and section not in ports:
            ports[section] = int(m.group(1))  # the first: server.tls.listen may follow
    return ports.get("server", 8080), ports.get("admin", 9901)


def _replace_once(text: str, pattern: str, replacement: str, source: str) -> str:
    text, count = re.subn(pattern, replacement, text)
    assert count == 1, f"{pattern!r} occurs {count} times in {source}"
    return text


def retarget(text: str, port: int, admin_port: int, redis_port: int, upstream: str,
             source: str = "the config") -> str:
    """A config written for the conventional addresses (listener 127.0.0.1:8080, admin
    127.0.0.1:9901, Redis 127.0.0.1:6379, one upstream server 127.0.0.1:9000), moved
    to the given ones. Each address must occur
    exactly once; otherwise AssertionError names the pattern and `source`."""
    replacements = [
        (r'(?m)^(  listen: )"127\.0\.0\.1:8080"', rf'\1"127.0.0.1:{port}"'),
        (r'(?m)^(  listen: )"127\.0\.0\.1:9901"', rf'\1"127.0.0.1:{admin_port}"'),
        (r'"redis://127\.0\.0\.1:6379/0"', f'"redis://127.0.0.1:{redis_port}/0"'),
        (r'servers: \["127\.0\.0\.1:9000"\]', f'servers: ["{upstream}"]'),
    ]
    for pattern, replacement in replacements:
        text = _replace_once(text, pattern, replacement, source)
    return text


def set_limit(text: str, name: str, capacity: str, rate: str, source: str = "the config") -> str:
    """The config with capacity and refill_per_second of limit `name` (a key of the
    top-level limits section) set; AssertionError when the limit is not there."""
    block = re.search(r"(?m)^  %s:.*\n((?:    .*\n)+)" % re.escape(name), text)
    assert block, f"limit {name} not in {source}"
    body = re.sub(r"(?m)^(    capacity:) *\S+", r"\g<1> " + str(capacity), block.group(1))
    body = re.sub(r"(?m)^(    refill_per_second:) *\S+", r"\g<1> " + str(rate), body)
    return text[:block.start(1)] + body + text[block.end(1):]


def _scalar_text(value: str) -> str:
    """A YAML scalar as written in a config line: comment and quotes removed."""
    value = re.sub(r"\s+#.*$", "", value).strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    return value


def _section(text: str, name: str) -> tuple[int, int]:
    """(start, end) offsets of the body of top-level section `name` ((0, 0) if absent)."""
    m = re.search(r"(?m)^%s:[^\n]*\n" % re.escape(name), text)
    if not m:
        return 0, 0
    end = re.search(r"(?m)^[^\s#]", text[m.end():])
    return m.end(), m.end() + end.start() if end else len(text)


def redis_settings(text: str) -> dict:
    """url, topology (default standalone), nodes (a list) and sentinel_master of the
    redis section of a config, read from its text (flow or block lists; "${VAR}" and
    "${VAR:-default}" taken from the environment as the gateway does)."""
    import os
    expand = (lambda s: re.sub(r"\$\{(\w+)(?::-([^}]*))?\}",
                               lambda m: os.environ.get(m.group(1)) or (m.group(2) or ""), s))
    start, end = _section(text, "redis")
    settings = {"url": "", "topology": "standalone", "nodes": [], "sentinel_master": ""}
    key = None
    for line in text[start:end].splitlines():
        item = re.match(r"^  ([a-z_]+):\s*(.*)$", line)
        if item:
            key, value = item.group(1), _scalar_text(item.group(2))
            if key == "nodes" and value.startswith("["):
                settings["nodes"] = [_scalar_text(v) for v in value.strip("[]").split(",")
                                     if v.strip()]
            elif key in settings and key != "nodes":
                settings[key] = expand(value)
            continue
        entry = re.match(r"^\s+-\s*(.+)$", line)
        if entry and key == "nodes":
            settings["nodes"].append(_scalar_text(entry.group(1)))
    settings["nodes"] = [expand(n) for n in settings["nodes"]]
    return settings


def set_redis_topology(text: str, topology: str, url: str, nodes: list[str],
                       sentinel_master: str = "", source: str = "the config") -> str:
    """The config with redis.url set and the topology keys (topology, nodes,
    sentinel_master) replaced by the given ones, written right after url."""
    start, end = _section(text, "redis")
    assert end > start, f"no redis section in {source}"
    body, kept, skipping = text[start:end], [], False
    for line in body.splitlines(keepends=True):
        if re.match(r"^  (topology|nodes|sentinel_master):", line):
            skipping = True  # the key and its block list, if any
            continue
        if skipping and re.match(r"^\s{3,}-|^\s{4,}\S", line):
            continue
        skipping = False
        kept.append(line)
    extra = [f"  topology: {topology}\n", f"  nodes: {json.dumps(nodes)}\n"]
    if sentinel_master:
        extra.append(f"  sentinel_master: {json.dumps(sentinel_master)}\n")
    body = _replace_once("".join(kept), r'(?m)^(  url: )"?[^"\s]*"?',
                         r"\g<1>" + json.dumps(url).replace("\\", "\\\\"), source)
    at = re.search(r"(?m)^  url:[^\n]*\n", body).end()
    body = body[:at] + "".join(extra) + body[at:]
    return text[:start] + body + text[end:]
