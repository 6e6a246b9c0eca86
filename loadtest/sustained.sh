#!/usr/bin/env bash
# Sustained scenario (hey): a constant arrival rate above the refill rate on one
# API key. Expected: after the initial burst of `capacity`, the 200s come at the
# refill rate; never more than C + R*T in total. Draws the picture: requests
# allowed and denied per 100 ms, with the configured rate as a line (gnuplot).
#
#   loadtest/sustained.sh              # own sluice + redis + upstream on free ports, 10 s
#   loadtest/sustained.sh --url http://127.0.0.1:8080/sustained   # against `scripts/run loadtest/conf/loadtest.yaml`
#
# Options: -z SECONDS (10)  -c WORKERS (3)  -q QPS_PER_WORKER (50)  --capacity C (10)
#          --rate R (50)  --url URL  --out DIR (default loadtest/results, and the chart
#          is copied to loadtest/sustained.png for the README; with --out, no copy)
# Exit status: 0 when the counts are as expected, 1 when not, 2 on a setup error.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

DURATION=10 WORKERS=3 QPS=50 CAPACITY=10 RATE=50 URL="" OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    -z) DURATION="$2"; shift 2 ;;
    -c) WORKERS="$2"; shift 2 ;;
    -q) QPS="$2"; shift 2 ;;
    --capacity) CAPACITY="$2"; shift 2 ;;
    --rate) RATE="$2"; shift 2 ;;
    --url) URL="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
    *) lt_die "unknown option $1 (see --help)" ;;
  esac
done
[[ "$URL" =~ ^http://(127\.0\.0\.1|localhost)[:/] || -z "$URL" ]] || lt_die "--url must be on 127.0.0.1"
[ "$DURATION" -ge 1 ] && [ "$DURATION" -le 300 ] || lt_die "-z must be 1..300 seconds"

lt_require hey:hey gnuplot:gnuplot-nox
if [ -z "$URL" ]; then
  lt_start_stack sustained "$CAPACITY" "$RATE"
  URL="http://127.0.0.1:$LT_PORT/sustained"
fi
COPY=""
if [ -z "$OUT" ]; then
  OUT="$LT_DIR/results"
  COPY="$LT_DIR/sustained.png"
fi
mkdir -p "$OUT"
STAMP="$(date +%Y-%m-%d-%H%M%S)"
CSV="$OUT/sustained-$STAMP.csv"
BINS="$OUT/sustained-$STAMP.dat"
PNG="$OUT/sustained-$STAMP.png"

KEY="sustained-$$-$RANDOM$RANDOM"
start=$(date +%s.%N)
hey -z "${DURATION}s" -c "$WORKERS" -q "$QPS" -t 10 -o csv -H "X-API-Key: $KEY" "$URL" >"$CSV"
end=$(date +%s.%N)

# Bins of 100 ms (by each request's start offset), the totals and the verdict.
summary="$(python3 - "$CSV" "$BINS" "$CAPACITY" "$RATE" "$start" "$end" <<'PY'
import csv, math, sys
path, bins_path, capacity, rate, start, end = sys.argv[1:]
capacity, rate, wall = float(capacity), float(rate), float(end) - float(start)
rows = list(csv.DictReader(open(path)))
bins = {}
counts = {}
last = 0.0
for r in rows:
    t, code = float(r["offset"]), r["status-code"]
    counts[code] = counts.get(code, 0) + 1
    b = bins.setdefault(int(t * 10), [0, 0])
    if code == "200":
        b[0] += 1
    elif code == "429":
        b[1] += 1
    last = max(last, t)
with open(bins_path, "w") as f:
    f.write("# t_seconds allowed denied (per 100 ms)\n")
    for i in range(0, max(bins) + 1 if bins else 0):
        a, d = bins.get(i, [0, 0])
        f.write(f"{i / 10 + 0.05:.2f} {a} {d}\n")
ok, denied = counts.get("200", 0), counts.get("429", 0)
other = len(rows) - ok - denied
# Steady state: from 1 s (the initial burst is long spent) to the last full second.
steady_end = math.floor(last)
steady = sum(bins.get(i, [0, 0])[0] for i in range(10, steady_end * 10))
steady_rate = steady / (steady_end - 1) if steady_end > 1 else float("nan")
bound = capacity + rate * wall  # the limiter can never allow more
offered = len(rows) / last if last else 0
verdict = "PASS"
if ok > bound + 1e-9 or other or denied == 0:
    verdict = "FAIL"
if steady_end > 1 and offered > 1.2 * rate and abs(steady_rate - rate) > 0.15 * rate:
    verdict = "FAIL"
print(f"requests={len(rows)} ok={ok} denied={denied} other={other} span={last:.2f} "
      f"wall={wall:.2f} offered={offered:.1f} steady_rate={steady_rate:.1f} "
      f"bound={bound:.1f} verdict={verdict}")
PY
)"
eval "$summary"

gnuplot <<EOF
set terminal pngcairo size 960,440 font "sans,10"
set output "$PNG"
set title "Sluice, one API key under a constant $(lt_calc "round($offered)") req/s (hey): capacity $CAPACITY, refill $RATE/s"
set xlabel "time since start (s)"
set ylabel "requests per 100 ms"
set key outside below horizontal maxrows 1
set grid ytics
set style fill solid 0.75 noborder
set boxwidth 0.09
set yrange [0:*]
set xrange [0:$(lt_calc "$DURATION + 0.2")]
plot "$BINS" using 1:(\$2+\$3) with boxes lc rgb "#e06666" title "denied (429)", \
     "$BINS" using 1:2 with boxes lc rgb "#3c78d8" title "allowed (200)", \
     $RATE / 10.0 with lines lw 2 dt 2 lc rgb "black" title "configured rate ($RATE/s = $(lt_calc "$RATE / 10") per 100 ms)"
EOF
[ -n "$COPY" ] && cp "$PNG" "$COPY"

cat <<EOF
sustained: one API key, $WORKERS workers x $QPS req/s for $DURATION s, capacity $CAPACITY, refill $RATE/s -> $URL
  requests    $requests   (offered $offered req/s)
  200         $ok   (at most C + R*T = $bound; T = ${wall} s)
  429         $denied
  other       $other
  steady 200  $steady_rate /s from 1 s on   (configured $RATE/s)
  chart       $PNG${COPY:+ (copied to $COPY)}
  data        $BINS, $CSV
  result      $verdict
EOF
[ "$verdict" = PASS ]
