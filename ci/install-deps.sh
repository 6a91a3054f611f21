#!/usr/bin/env bash
# Installs every Debian 12 package Catena builds, tests and benchmarks with.
# Idempotent: does nothing when all are present.
# ZooKeeper: the C client for the controller's ZooKeeper store, and the
# server's jars (libzookeeper-java, not the `zookeeper` package, which pulls
# a desktop JRE and a GUI) run with a headless JRE by the tests that start a
# server of their own (tests/control/zk_server.hpp). dpkg-dev and file:
# cpack's .deb packages (dpkg-shlibdeps; ci/install-check.sh). pybind11-dev,
# python3-dev: the Python module (broker/capi/python). prometheus-cpp-dev:
# the daemons' metrics endpoints (core + pull libraries). libsystemd-dev:
# sd_notify, for the daemons' Type=notify units (service_notify.hpp).
# libexpat1-dev: the test that parses `catena bench`'s SVG plot as XML
# (tests/bench).
set -euo pipefail
PKGS=(
  build-essential cmake ninja-build pkg-config git clang clang-format clang-tidy
  dpkg-dev file
  libibverbs-dev librdmacm-dev rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest
  thrift-compiler libthrift-dev libssl-dev libboost-dev libevent-dev
  libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev libtomlplusplus-dev libxxhash-dev libisal-dev
  pybind11-dev python3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libdpdk-dev zlib1g-dev
  libzookeeper-mt-dev libzookeeper-java default-jre-headless
  prometheus-cpp-dev libsystemd-dev libexpat1-dev
  qemu-system-x86 busybox-static kmod cpio iproute2 procps
  systemd
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "ci/install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
