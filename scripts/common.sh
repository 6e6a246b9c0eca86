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

SLUICE_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libboost1.81-dev libhiredis-dev nlohmann-json3-dev libyaml-cpp-dev
  libspdlog-dev libfmt-dev catch2 libssl-dev
  redis-server python3 openssl curl procps hey gnuplot-nox
)
# node checks the k6 scenarios' syntax; Debian's nodejs only where there is no node at all.
command -v node >/dev/null 2>&1 || SLUICE_PACKAGES+=(nodejs)

log() { printf '\033[1m[sluice]\033[0m %s\n' "$*" >&2; }

install_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing Debian packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

build_sluice() {
  install_packages "${SLUICE_PACKAGES[@]}"
  if [ ! -f "$SLUICE_BUILD/build.ninja" ]; then
    log "configuring $SLUICE_BUILD"
    cmake -S "$SLUICE_ROOT" -B "$SLUICE_BUILD" -G Ninja \
      -DCMAKE_BUILD_TYPE="${SLUICE_BUILD_TYPE:-RelWithDebInfo}" ${SLUICE_CMAKE_ARGS:-} >/dev/null
  fi
  log "building (ninja, ccache)"
  ninja -C "$SLUICE_BUILD" ${SLUICE_NINJA_ARGS:-}
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
