# Multi-stage build: Debian 12 with the -dev packages builds; a slim Debian 12
# with only the runtime libraries runs, as a non-root user.
#   docker build -t sluice .          (podman build works the same way)
# BUILD_JOBS limits the compile jobs (default: ninja's, one per core + 2).
FROM debian:12 AS build
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config libboost1.81-dev libhiredis-dev \
      nlohmann-json3-dev libyaml-cpp-dev libspdlog-dev libfmt-dev libssl-dev \
      libhowardhinnant-date-dev libnghttp2-dev libre2-dev zlib1g-dev \
      libprotobuf-dev protobuf-compiler \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
ARG BUILD_JOBS=
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSLUICE_BUILD_TESTS=OFF \
    && ninja -C build ${BUILD_JOBS:+-j$BUILD_JOBS} sluice sluice-echo \
    && strip build/sluice build/sluice-echo

FROM debian:12-slim
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libhiredis0.14 libyaml-cpp0.7 libspdlog1.10 libfmt9 libssl3 libdate-tz3 libnghttp2-14 libre2-9 zlib1g libprotobuf32 tzdata \
      ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home sluice
COPY --from=build /src/build/sluice /src/build/sluice-echo /usr/local/bin/
COPY conf/ /etc/sluice/
USER sluice
EXPOSE 8080 9901
ENTRYPOINT ["/usr/local/bin/sluice"]
# Listeners on all interfaces; Redis and the upstream from SLUICE_REDIS_URL and SLUICE_UPSTREAM.
CMD ["--config", "/etc/sluice/container.yaml"]
