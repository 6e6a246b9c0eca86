#!/usr/bin/env bash
# Many-keys scenario (wrk + hey): thousands of API keys, each well below its own
# rate, plus one hot key far above it, at the same time. Expected: not a single
# 429 for the thousands (nobody is limited below their own rate, whatever the
# others do), and the hot key held to C + R*T.
#
#   loadtest/many_keys.sh              # own sluice + redis + upstream on free ports, 10 s
#   loadtest/many_keys.sh --url http://127.0.0.1:8080/keys   # against `scripts/run loadtest/conf/loadtest.yaml`
#
# Options: -z SECONDS (10)  --keys K (2000)  -c CONNECTIONS (20)  --delay-ms D (10; each
#          connection waits D ms between requests: about C*1000/D req/s offered in all)
#          --capacity C (10)  --rate R (5)  --url URL
# Exit status: 0 when the counts are as expected, 1 when not, 2 on a setup error.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

DURATION=10 NKEYS=2000 CONNS=20 DELAY=10 CAPACITY=10 RATE=5 URL=""
while [ $# -gt 0 ]; do
  case "$1" in
    -z) DURATION="$2"; shift 2 ;;
    --keys) NKEYS="$2"; shift 2 ;;
    -c) CONNS="$2"; shift 2 ;;
    --delay-ms) DELAY="$2"; shift 2 ;;
    --capacity) CAPACITY="$2"; shift 2 ;;
    --rate) RATE="$2"; shift 2 ;;
    --url) URL="$2"; shift 2 ;;
    -h | --help) sed -n '2,15p' "$0"; exit 0 ;;
    *) lt_die "unknown option $1 (see --help)" ;;
  esac
done
[[ "$URL" =~ ^http://(127\.0\.0\.1|localhost)[:/] || -z "$URL" ]] || lt_die "--url must be on 127.0.0.1"
[ "$DURATION" -ge 1 ] && [ "$DURATION" -le 300 ] || lt_die "-z must be 1..300 seconds"

lt_require wrk:wrk hey:hey
if [ -z "$URL" ]; then
  lt_start_stack many_keys "$CAPACITY" "$RATE"
  URL="http://127.0.0.1:$LT_PORT/keys"
fi

RUN="mk-$$-$RANDOM"
HOT_OUT="$(mktemp)"
# The hot key: 2 workers x 100 req/s, far above its refill rate.
hey -z "${DURATION}s" -c 2 -q 100 -t 10 -H "X-API-Key: $RUN-hot" "$URL" >"$HOT_OUT" &
HEY_PID=$!
start=$(date +%s.%N)
WRK_OUT="$(wrk -t1 -c"$CONNS" -d"${DURATION}s" -s "$LT_DIR/wrk/many_keys.lua" "$URL" -- "$RUN" "$NKEYS" "$DELAY")"
end=$(date +%s.%N)
wait "$HEY_PID" || true
hot_report="$(cat "$HOT_OUT")"
rm -f "$HOT_OUT"

count_status() { sed -n "s/^STATUS $1 \([0-9]*\)$/\1/p" <<<"$WRK_OUT" | head -1; }
ok="$(count_status 200)"; ok="${ok:-0}"
limited="$(count_status 429)"; limited="${limited:-0}"
total="$(awk '/^STATUS /{s += $3} END {print s + 0}' <<<"$WRK_OUT")"
errors="$(sed -n 's/^ERRORS \([0-9]*\)$/\1/p' <<<"$WRK_OUT")"
wall=$(lt_calc "round($end - $start, 2)")
per_key=$(lt_calc "round($total / ($NKEYS * $wall), 2)")
offered=$(lt_calc "round($total / $wall)")
hot_ok=$(lt_hey_count "$hot_report" 200)
hot_limited=$(lt_hey_count "$hot_report" 429)
hot_bound=$(lt_calc "round($CAPACITY + $RATE * $wall, 1)")

verdict=PASS
[ "$limited" -eq 0 ] && [ "$ok" -eq "$total" ] && [ "$total" -gt 0 ] && [ "${errors:-0}" -eq 0 ] || verdict=FAIL
[ "$(lt_calc "int($hot_ok <= $hot_bound)")" = 1 ] && [ "$hot_limited" -gt 0 ] || verdict=FAIL
note=""
[ "$(lt_calc "int($per_key < $RATE)")" = 1 ] || note="   (NOTE: above the per-key rate; lower -c or raise --delay-ms)"

cat <<EOF
many keys: $NKEYS API keys for $DURATION s, capacity $CAPACITY, refill $RATE/s each -> $URL
  offered      $offered req/s over $NKEYS keys = $per_key req/s per key$note
  200          $ok
  429          $limited   (expected 0: every key is below its own rate)
  other        $((total - ok - limited)), socket errors ${errors:-?}
  hot key      200: $hot_ok (at most C + R*T = $hot_bound), 429: $hot_limited   ($(lt_hey_statuses "$hot_report"))
  result       $verdict
EOF
[ "$verdict" = PASS ]
