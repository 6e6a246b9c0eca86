#!/usr/bin/env python3
"""The Grafana dashboard's panels drawn from a real run, without Grafana.

Starts redis-server, sluice-echo, build/sluice and a real Prometheus (Debian
12's `prometheus` package: its binary only, unpacked into build/tools as
scripts/get-promtool does for promtool) scraping the gateway every second,
puts a minute of mixed load on it with wrk (keyed requests, a hot key that is
denied, a chat route whose cost is settled from the response and held by a
concurrency limit), then asks Prometheus for the dashboard's own queries
(deploy/grafana/sluice-dashboard.json, $job/$instance matching everything,
$__rate_interval 5s) and draws twelve panels with gnuplot.

    loadtest/dashboard.py [--out loadtest/dashboard.png] [--seconds 60]

Everything runs on 127.0.0.1 and is stopped by PID at the end.
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from testkit.configs import gateway_config  # noqa: E402
from testkit.ports import free_port  # noqa: E402
from testkit.processes import Echo, Process, Redis, Sluice, wait_until  # noqa: E402

DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "sluice-dashboard.json")
WRK_SCRIPT = os.path.join(ROOT, "loadtest", "wrk", "many_keys.lua")
PANELS = [
    "Request rate by route",
    "Responses by status code",
    "Latency by route (p50, p90, p99)",
    "Limited decisions by route and limit",
    "Near the limit (admitted with < 10 % left) by route and limit",
    "Shadow denials by route and limit (would have been 429)",
    "Limiter decision latency (p50, p99)",
    "Decisions made without Redis (denial cache, leases)",
    "Concurrency slots held by limit",
    "Settled units by route and direction",
    "Denial stream: appended and dropped",
    "Redis commands and writes",
]


def log(text):
    print(f"[dashboard] {text}", file=sys.stderr, flush=True)


def prometheus_binary(tools: str) -> str:
    """prometheus on PATH, or in `tools`, or unpacked there from the Debian package."""
    found = shutil.which("prometheus") or os.path.join(tools, "prometheus")
    if os.access(found, os.X_OK):
        return found
    os.makedirs(tools, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=tools) as work:
        subprocess.run(["apt-get", "download", "-qq", "prometheus"], cwd=work, check=True,
                       stdout=subprocess.DEVNULL)
        deb = glob.glob(os.path.join(work, "prometheus_*.deb"))[0]
        tar = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", deb], stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", work, "./usr/bin/prometheus"], stdin=tar.stdout,
                       check=True)
        tar.wait()
        shutil.move(os.path.join(work, "usr", "bin", "prometheus"), found)
    return found


def panel_queries():
    """{title: [(expr, legend)]} of the chosen panels, with Grafana's variables filled in."""
    with open(DASHBOARD) as f:
        dashboard = json.load(f)
    found = {}

    def walk(panels):
        for panel in panels:
            if panel.get("title") in PANELS:
                found[panel["title"]] = [
                    (t["expr"].replace('job=~"$job",instance=~"$instance"', 'job=~".+"')
                              .replace("$__rate_interval", "5s"),
                     t.get("legendFormat", "")) for t in panel["targets"]]
            walk(panel.get("panels", []))
    walk(dashboard["panels"])
    missing = [title for title in PANELS if title not in found]
    if missing:
        raise SystemExit(f"dashboard panels not found: {missing}")
    return found


def query_range(port, expr, start, end):
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": "1"})
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query_range?{params}",
                                timeout=30) as res:
        doc = json.load(res)
    if doc.get("status") != "success":
        raise RuntimeError(f"{expr}: {doc}")
    return doc["data"]["result"]


def legend_of(template, labels):
    text = template or ",".join(f"{k}={v}" for k, v in labels.items() if k != "__name__")
    for key, value in labels.items():
        text = text.replace("{{" + key + "}}", value)
    return text.replace("{{", "").replace("}}", "").strip() or "value"


def gateway(workdir, redis_port, echo_address):
    limits = {
        "per_key": {"key": "api_key", "capacity": 20, "refill_per_second": 5},
        "dry_global": {"key": "global", "capacity": 300, "refill_per_second": 200,
                       "shadow": True},
        "tokens": {"key": "api_key", "capacity": 200000, "refill_per_second": 20000},
        "in_flight": {"key": "api_key", "algorithm": "concurrency", "capacity": 3},
    }
    routes = [
        {"name": "chat", "match": {"path_prefix": "/__slow/"}, "upstream": "app",
         "limits": ["tokens", "in_flight"], "cost": 500,
         "cost_from_response": {"header": "X-Usage-Tokens"},
         "request_headers": {"set": {"X-Echo-Usage": "120"}}},
        {"name": "api", "match": {"path_prefix": "/"}, "upstream": "app",
         "limits": ["per_key", "dry_global"]},
    ]
    config = gateway_config({"app": [echo_address]}, routes, server={"threads": 2},
                            redis={"url": f"redis://127.0.0.1:{redis_port}/0"},
                            log={"level": "warn", "access_log": False},
                            audit={"redis_stream": "sluice:denials", "max_len": 10000},
                            limits=limits)
    return Sluice(workdir, config)


def wrk(workdir, name, url, seconds, connections, prefix, keys, delay_ms):
    return Process(name, ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-s", WRK_SCRIPT,
                          url, "--", prefix, str(keys), str(delay_ms)], workdir)


def draw(out, series_by_panel, start, workdir):
    lines = ["set terminal pngcairo size 1800,1350 font 'DejaVu Sans,9' noenhanced",
             f"set output '{out}'",
             "set multiplot layout 4,3 title 'Sluice dashboard panels: one minute of mixed load "
             "(Prometheus scraping every second; the dashboard queries drawn with gnuplot)'",
             "set key top left font ',7' opaque", "set grid", "set xlabel 'seconds'",
             "set xrange [0:*]", "set format y '%.3g'"]
    for p, title in enumerate(PANELS):
        series = series_by_panel[title]
        lines.append(f"set title \"{title}\" font ',10'")
        if not series:
            lines.append("set label 1 'no data' at graph 0.45, graph 0.5")
            lines.append("plot NaN notitle")
            lines.append("unset label 1")
            continue
        plots = []
        for s, (legend, points) in enumerate(series[:8]):
            path = os.path.join(workdir, f"p{p}_{s}.dat")
            with open(path, "w") as f:
                for t, v in points:
                    f.write(f"{t - start:.0f} {v}\n")
            plots.append(f"'{path}' using 1:2 with lines lw 1.5 title \"{legend[:40]}\"")
        lines.append("plot " + ", ".join(plots))
    lines.append("unset multiplot")
    script = os.path.join(workdir, "panels.gp")
    with open(script, "w") as f:
        f.write("\n".join(lines) + "\n")
    subprocess.run(["gnuplot", script], check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "loadtest", "dashboard.png"))
    ap.add_argument("--seconds", type=int, default=60)
    opts = ap.parse_args()
    for tool in ("wrk", "gnuplot", "redis-server"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is not installed")
    queries = panel_queries()
    prometheus = prometheus_binary(os.path.join(ROOT, "build", "tools"))
    started = []
    with tempfile.TemporaryDirectory(prefix="sluice-dashboard-") as workdir:
        try:
            redis = Redis(workdir)
            started.append(redis)
            echo = Echo(workdir)
            started.append(echo)
            gw = gateway(workdir, redis.port, echo.address)
            started.append(gw)
            prom_port = free_port()
            with open(os.path.join(workdir, "prometheus.yml"), "w") as f:
                f.write("global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                        "scrape_configs:\n  - job_name: sluice\n    static_configs:\n"
                        f"      - targets: ['127.0.0.1:{gw.admin_port}']\n")
            prom = Process("prometheus", [
                prometheus, f"--config.file={os.path.join(workdir, 'prometheus.yml')}",
                f"--storage.tsdb.path={os.path.join(workdir, 'tsdb')}",
                f"--web.listen-address=127.0.0.1:{prom_port}"], workdir)
            started.append(prom)
            wait_until(lambda: query_range(prom_port, "up", time.time() - 5, time.time()), 30,
                       interval=0.5, message="Prometheus scraping")
            start = time.time()
            base = f"http://127.0.0.1:{gw.port}"
            n = opts.seconds
            log(f"{n} s of load: keyed /api all along, a hot key from {n // 4} s, "
                f"a chat route from {n * 5 // 12} s")
            loads = [wrk(workdir, "keyed", f"{base}/api", n, 16, "user", 100, 20)]
            time.sleep(n // 4)
            loads.append(wrk(workdir, "hot", f"{base}/api", n // 3, 8, "hot", 1, 5))
            time.sleep(n * 5 // 12 - n // 4)
            loads.append(wrk(workdir, "chat", f"{base}/__slow/50", n // 2, 24, "team", 6, 20))
            started.extend(loads)
            for load in loads:
                load.proc.wait(timeout=n + 30)
            time.sleep(3)  # the last scrapes and the audit's last flush
            end = time.time()
            log("querying Prometheus and drawing")
            series_by_panel = {}
            for title in PANELS:
                series = []
                for expr, legend in queries[title]:
                    for result in query_range(prom_port, expr, start, end):
                        points = [(float(t), float(v)) for t, v in result["values"]
                                  if v not in ("NaN", "+Inf", "-Inf")]
                        if points:
                            series.append((legend_of(legend, result["metric"]), points))
                series_by_panel[title] = series
            draw(opts.out, series_by_panel, start, workdir)
            log(f"wrote {opts.out}")
        finally:
            for process in reversed(started):
                process.stop()


if __name__ == "__main__":
    main()
