# Shared by loadtest/*.sh (sourced, not run): options, a private gateway stack
# on free 127.0.0.1 ports (sluice-echo, redis-server, sluice with a copy of
# loadtest/conf/loadtest.yaml), stopped by PID on exit, and small helpers.

LT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$LT_DIR/../scripts/common.sh"

LT_CONFIG_TEMPLATE="$LT_DIR/conf/loadtest.yaml"
LT_STARTED=()
LT_WORK=""

lt_cleanup() {
  local pid
  for pid in "${LT_STARTED[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${LT_STARTED[@]}"; do wait "$pid" 2>/dev/null || true; done
  LT_STARTED=()
  [ -n "$LT_WORK" ] && rm -rf "$LT_WORK"
  LT_WORK=""
}
trap lt_cleanup EXIT
trap 'exit 130' INT TERM

lt_die() { log "$*"; exit 2; }

# Installs the Debian packages of missing tools: lt_require hey:hey wrk:wrk ...
lt_require() {
  local spec missing=()
  for spec in "$@"; do
    command -v "${spec%%:*}" >/dev/null 2>&1 || missing+=("${spec#*:}")
  done
  [ ${#missing[@]} -eq 0 ] || install_packages "${missing[@]}"
}

lt_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Binaries: $SLUICE_BIN / $SLUICE_ECHO_BIN, else build/ (built when missing).
lt_binaries() {
  SLUICE_BIN="${SLUICE_BIN:-$SLUICE_BUILD/sluice}"
  SLUICE_ECHO_BIN="${SLUICE_ECHO_BIN:-$SLUICE_BUILD/sluice-echo}"
  if [ ! -x "$SLUICE_BIN" ] || [ ! -x "$SLUICE_ECHO_BIN" ]; then
    SLUICE_NINJA_ARGS="sluice sluice-echo" build_sluice
  fi
}

# lt_start_stack LIMIT CAPACITY RATE
# Starts sluice-echo, redis-server and sluice (the limit LIMIT of the config set
# to CAPACITY and RATE). Sets LT_PORT (gateway), LT_ADMIN, LT_REDIS_PORT.
lt_start_stack() {
  local limit="$1" capacity="$2" rate="$3" echo_port i
  lt_binaries
  command -v redis-server >/dev/null || install_packages redis-server
  LT_WORK="$(mktemp -d "${TMPDIR:-/tmp}/sluice-loadtest.XXXXXX")"

  : >"$LT_WORK/echo.out"
  "$SLUICE_ECHO_BIN" --listen 127.0.0.1:0 --quiet >>"$LT_WORK/echo.out" 2>&1 &
  LT_STARTED+=($!)
  for ((i = 0; i < 100; i++)); do
    echo_port="$(sed -n '1s/^listening 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$LT_WORK/echo.out" || true)"
    [ -n "$echo_port" ] && break
    sleep 0.05
  done
  [ -n "$echo_port" ] || lt_die "sluice-echo did not start: $(cat "$LT_WORK/echo.out")"

  LT_REDIS_PORT="$(lt_free_port)"
  redis-server --port "$LT_REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
    --loglevel warning --dir "$LT_WORK" >"$LT_WORK/redis.out" 2>&1 &
  LT_STARTED+=($!)
  wait_port "$LT_REDIS_PORT" 100 || lt_die "redis-server did not start: $(cat "$LT_WORK/redis.out")"

  LT_PORT="$(lt_free_port)"
  LT_ADMIN="$(lt_free_port)"
  python3 - "$LT_CONFIG_TEMPLATE" "$LT_WORK/sluice.yaml" "$limit" "$capacity" "$rate" \
    "$LT_PORT" "$LT_ADMIN" "$LT_REDIS_PORT" "$echo_port" <<'PY'
import re, sys
src, dst, limit, capacity, rate, port, admin, redis, echo = sys.argv[1:]
text = open(src).read()
for old, new in (("127.0.0.1:8080", port), ("127.0.0.1:9901", admin),
                 ("127.0.0.1:6379", redis), ("127.0.0.1:9000", echo)):
    text = text.replace(old, "127.0.0.1:" + new)
# Set capacity and refill of the one limit under "limits:".
block = re.search(r"(?m)^  %s:.*\n((?:    .*\n)+)" % re.escape(limit), text)
if not block:
    sys.exit(f"limit {limit} not in {src}")
body = re.sub(r"(?m)^(    capacity:) *\S+", r"\g<1> " + capacity, block.group(1))
body = re.sub(r"(?m)^(    refill_per_second:) *\S+", r"\g<1> " + rate, body)
text = text[:block.start(1)] + body + text[block.end(1):]
open(dst, "w").write(text)
PY
  [ -s "$LT_WORK/sluice.yaml" ] || lt_die "could not write the gateway config"
  "$SLUICE_BIN" --config "$LT_WORK/sluice.yaml" >"$LT_WORK/sluice.out" 2>&1 &
  LT_STARTED+=($!)
  for ((i = 0; i < 200; i++)); do
    curl -fs "http://127.0.0.1:$LT_ADMIN/readyz" 2>/dev/null | grep -q '"redis":"ready"' && return 0
    kill -0 "${LT_STARTED[-1]}" 2>/dev/null || break
    sleep 0.05
  done
  lt_die "sluice did not become ready: $(cat "$LT_WORK/sluice.out")"
}

# The count of responses with status $2 in hey's report $1 (0 when none).
lt_hey_count() {
  local n
  n="$(sed -n "s/^ *\[$2\][[:space:]]*\([0-9]*\) responses.*/\1/p" <<<"$1" | head -1)"
  echo "${n:-0}"
}

# Every status count in hey's report $1 as "code:count" words.
lt_hey_statuses() {
  sed -n 's/^ *\[\([0-9]*\)\][[:space:]]*\([0-9]*\) responses.*/\1:\2/p' <<<"$1" | tr '\n' ' '
}

# Float arithmetic: lt_calc 'C + R * T' (python expression over numbers).
lt_calc() { python3 -c "import math; print($1)"; }
