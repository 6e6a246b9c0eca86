# Shared by scripts/run, scripts/test and scripts/bench: install what is
# missing (Debian 12 packages only), then configure and build with ninja.
# Sourced, not run.

SLUICE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# SLUICE_SANITIZE="address;undefined" (or "thread") builds and tests with
# sanitizers in a build directory of its own.
if [ -n "${SLUICE_SANITIZE:-}" ]; then
  SLUICE_BUILD="${SLUICE_BUILD:-$SLUICE_ROOT/build-sanitize}"
  SLUICE_CMAKE_ARGS="${SLUICE_CMAKE_ARGS:-} -DSLUICE_SANITIZE=${SLUICE_SANITIZE}"
fi
SLUICE_BUILD="${SLUICE_BUILD:-$SLUICE_ROOT/build}"

# What building and running the gateway needs (scripts/run): the compiler and
# build tools, the -dev libraries, redis-server, redis-sentinel and redis-tools
# (redis-cli, which creates a local cluster), and python3 to read the endpoints
# the binary prints and to bring up a local cluster or sentinel set.
SLUICE_RUN_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libboost1.81-dev libhiredis-dev nlohmann-json3-dev libyaml-cpp-dev
  libspdlog-dev libfmt-dev libssl-dev libhowardhinnant-date-dev tzdata libnghttp2-dev libre2-dev
  zlib1g-dev libprotobuf-dev protobuf-compiler
  redis-server redis-sentinel redis-tools python3
)
# What the tests add (scripts/test): Catch2 for the unit tests, tools that
# integration tests call (openssl for certificates, curl, procps, hey and
# gnuplot for the load-test scripts, python3-yaml to read the Kubernetes
# manifests, nghttp2-client (nghttp, h2load), python3-h2 to write raw HTTP/2
# frames, python3-grpcio as a gRPC client and server, faketime to run a
# gateway whose clock is wrong, chromium, the browser of the CORS test, and
# python3-jwt and python3-cryptography to sign the JWT tests' tokens and keys,
# python3-grpc-tools and python3-protobuf for a rate-limit service client
# generated from the same .proto files, playing Envoy).
SLUICE_TEST_PACKAGES=(catch2 openssl curl procps hey gnuplot-nox python3-yaml nghttp2-client
  python3-h2 python3-grpcio faketime chromium python3-jwt python3-cryptography
  python3-grpc-tools python3-protobuf)
# node checks the k6 scenarios' syntax; Debian's nodejs only where there is no node at all.
command -v node >/dev/null 2>&1 || SLUICE_TEST_PACKAGES+=(nodejs)
SLUICE_PACKAGES=("${SLUICE_RUN_PACKAGES[@]}" "${SLUICE_TEST_PACKAGES[@]}")

# Never fails: a closed stderr (a `| tee` ended by Ctrl-C) must not stop a script mid-cleanup.
log() { printf '\033[1m[sluice]\033[0m %s\n' "$*" >&2 2>/dev/null || true; }

# Installs the Debian packages among "$@" that are missing (apt-get, as root or
# with sudo). SLUICE_SKIP_INSTALL=1 installs nothing.
install_packages() {
  local missing=() p
  [ -n "${SLUICE_SKIP_INSTALL:-}" ] && return 0
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${#missing[@]} Debian packages (about 1 to 2 minutes): ${missing[*]}"
  local sudo="" started=$SECONDS
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  # One line per package set up, so that a long install shows it is moving.
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends \
    -o Dpkg::Use-Pty=0 "${missing[@]}" |
    { grep --line-buffered '^Setting up ' || true; } |
    while IFS= read -r line; do log "  apt: ${line#Setting up }"; done
  [ "${PIPESTATUS[0]}" -eq 0 ] || { log "apt-get install failed"; return 1; }
  log "packages installed in $((SECONDS - started)) s"
}

# configure_build ON|OFF: configures $SLUICE_BUILD if it is not yet, with or
# without the tests (SLUICE_BUILD_TESTS); ON also turns the tests on in a
# directory that scripts/run configured without them.
configure_build() {
  if [ ! -f "$SLUICE_BUILD/build.ninja" ]; then
    log "configuring $SLUICE_BUILD"
    cmake -S "$SLUICE_ROOT" -B "$SLUICE_BUILD" -G Ninja -DSLUICE_BUILD_TESTS="$1" \
      -DCMAKE_BUILD_TYPE="${SLUICE_BUILD_TYPE:-RelWithDebInfo}" ${SLUICE_CMAKE_ARGS:-} >/dev/null
  elif [ "$1" = ON ] && grep -qx 'SLUICE_BUILD_TESTS:BOOL=OFF' "$SLUICE_BUILD/CMakeCache.txt"; then
    log "configuring $SLUICE_BUILD with the tests"
    cmake -S "$SLUICE_ROOT" -B "$SLUICE_BUILD" -DSLUICE_BUILD_TESTS=ON >/dev/null
  fi
}

# Everything, tests included (scripts/test; SLUICE_NINJA_ARGS picks targets).
# From nothing about 4 minutes on 2 cores; ninja shows [done/total] as it goes.
build_sluice() {
  install_packages "${SLUICE_PACKAGES[@]}"
  configure_build ON
  log "building (ninja, ccache; about 4 minutes from nothing on 2 cores)"
  local started=$SECONDS
  ninja -C "$SLUICE_BUILD" ${SLUICE_NINJA_ARGS:-}
  log "built in $((SECONDS - started)) s"
}

# The gateway and the demo upstream only (scripts/run): no test tools, no tests.
build_for_run() {
  install_packages "${SLUICE_RUN_PACKAGES[@]}"
  configure_build OFF
  log "building sluice and sluice-echo (ninja, ccache; about 2 minutes from nothing on 2 cores)"
  local started=$SECONDS
  ninja -C "$SLUICE_BUILD" sluice sluice-echo
  log "built in $((SECONDS - started)) s"
}

# True when something accepts TCP connections on 127.0.0.1:$1.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Waits until 127.0.0.1:$1 accepts connections, at most $2 tenths of a second.
wait_port() {
  local i
  for ((i = 0; i < ${2:-100}; i++)); do
    port_open "$1" && return 0
    sleep 0.1
  done
  return 1
}
