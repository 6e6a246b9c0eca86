#!/usr/bin/env bash
# Burst scenario (hey): one API key, a burst well above the bucket's capacity.
# Expected: exactly `capacity` responses 200 (plus one per token refilled while
# the burst lasts, none with the default 0.05/s), the rest 429 with Retry-After.
#
#   loadtest/burst.sh                  # starts its own sluice + redis + upstream on free ports
#   loadtest/burst.sh --url http://127.0.0.1:8080/burst    # against `scripts/run loadtest/conf/loadtest.yaml`
#
# Options: -n REQUESTS (100)  -c CONCURRENCY (10)  --capacity C (20)  --rate R (0.05)
#          --url URL (then C and R must be what that gateway is configured with)
# Exit status: 0 when the counts are as expected, 1 when not, 2 on a setup error.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

N=100 CONC=10 CAPACITY=20 RATE=0.05 URL=""
while [ $# -gt 0 ]; do
  case "$1" in
    -n) N="$2"; shift 2 ;;
    -c) CONC="$2"; shift 2 ;;
    --capacity) CAPACITY="$2"; shift 2 ;;
    --rate) RATE="$2"; shift 2 ;;
    --url) URL="$2"; shift 2 ;;
    -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
    *) lt_die "unknown option $1 (see --help)" ;;
  esac
done
[[ "$URL" =~ ^http://(127\.0\.0\.1|localhost)[:/] || -z "$URL" ]] || lt_die "--url must be on 127.0.0.1"

lt_require hey:hey curl:curl
if [ -z "$URL" ]; then
  lt_start_stack burst "$CAPACITY" "$RATE"
  URL="http://127.0.0.1:$LT_PORT/burst"
fi

KEY="burst-$$-$RANDOM$RANDOM"
start=$(date +%s.%N)
report="$(hey -n "$N" -c "$CONC" -t 10 -H "X-API-Key: $KEY" "$URL")"
end=$(date +%s.%N)
ok=$(lt_hey_count "$report" 200)
limited=$(lt_hey_count "$report" 429)
others=$((N - ok - limited))

# One more request: must be a 429 with Retry-After >= 1.
headers="$(curl -s -D - -o /dev/null -H "X-API-Key: $KEY" "$URL" | tr -d '\r')"
status="$(sed -n '1s/^HTTP\/[0-9.]* \([0-9]*\).*/\1/p' <<<"$headers")"
retry="$(sed -n 's/^[Rr]etry-[Aa]fter: *//p' <<<"$headers")"

elapsed=$(lt_calc "round($end - $start, 3)")
# Tokens refilled while the burst lasted (the after-request included): at most
# floor(R * elapsed) more than the capacity can be allowed.
extra=$(lt_calc "int(math.floor($RATE * $elapsed))")
lo=$(lt_calc "min($N, int(math.floor($CAPACITY)))")
hi=$(lt_calc "min($N, int(math.floor($CAPACITY)) + $extra)")

verdict=PASS
[ "$ok" -ge "$lo" ] && [ "$ok" -le "$hi" ] || verdict=FAIL
[ "$others" -eq 0 ] || verdict=FAIL
if [ "$N" -ge "$((hi + 1))" ]; then
  [ "$status" = 429 ] && [ "${retry:-0}" -ge 1 ] || verdict=FAIL
fi

expected="$lo"
[ "$hi" -ne "$lo" ] && expected="$lo..$hi"
cat <<EOF
burst: $N requests, $CONC concurrent, one API key, capacity $CAPACITY, refill $RATE/s -> $URL
  took        ${elapsed} s
  200         $ok   (expected $expected)
  429         $limited   (expected $((N - hi))$([ "$hi" -ne "$lo" ] && echo "..$((N - lo))"))
  other       $others   ($(lt_hey_statuses "$report"))
  one more    $status, Retry-After: ${retry:-none}
  result      $verdict
EOF
[ "$verdict" = PASS ]
