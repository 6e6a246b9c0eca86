# Shared by loadtest/*.sh (sourced, not run): options, a private gateway stack
# on free 127.0.0.1 ports (sluice-echo, redis-server, sluice with a copy of
# loadtest/conf/loadtest.yaml, started by the testkit: python3 -m testkit),
# stopped by PID on exit, and small helpers.

LT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$LT_DIR/../scripts/common.sh"

LT_CONFIG_TEMPLATE="$LT_DIR/conf/loadtest.yaml"
LT_WORK=""

# The testkit's command line (tests/testkit/__main__.py).
lt_kit() { PYTHONPATH="$SLUICE_ROOT/tests${PYTHONPATH:+:$PYTHONPATH}" python3 -m testkit "$@"; }

lt_cleanup() {
  if [ -n "$LT_WORK" ]; then
    lt_kit stop "$LT_WORK/pids" || true
    rm -rf "$LT_WORK"
  fi
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
  local ports port admin_port redis_port
  lt_binaries
  command -v redis-server >/dev/null || install_packages redis-server
  LT_WORK="$(mktemp -d "${TMPDIR:-/tmp}/sluice-loadtest.XXXXXX")"
  ports="$(SLUICE_BIN="$SLUICE_BIN" SLUICE_ECHO_BIN="$SLUICE_ECHO_BIN" \
    lt_kit stack "$LT_WORK" "$LT_CONFIG_TEMPLATE" --limit "$1" "$2" "$3")" ||
    lt_die "the gateway stack did not start"
  read -r port admin_port redis_port <<<"$ports"
  LT_PORT="${port#port=}"
  LT_ADMIN="${admin_port#admin_port=}"
  LT_REDIS_PORT="${redis_port#redis_port=}"
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
