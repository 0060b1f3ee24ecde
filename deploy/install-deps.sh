#!/usr/bin/env bash
# Installs the Debian (bookworm) packages the build and tests need. Idempotent: installs only
# what is missing, and uses sudo when not root. Nothing else is downloaded.
# prometheus (server and promtool) is for deploy/prometheus_check.sh and deploy/check.sh; without
# recommends, so that prometheus-node-exporter (listening on 9100, dlrm's default metrics port)
# is not installed. On a host with systemd the package also starts its own server on :9090.
# ocl-icd-opencl-dev: Debian's oneDNN is built with its OpenCL GPU runtime, so its CMake config
# (find_package(dnnl)) requires OpenCL; libdnnl-dev only recommends it, and recommends are off.
# tini: the image's PID 1 (deploy/Dockerfile), run by k8s/checks/run_manifests.py as pods run it.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  librocksdb-dev libabsl-dev prometheus-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev libdnnl-dev ocl-icd-opencl-dev libgloo-dev
  libyaml-cpp-dev libcli11-dev nlohmann-json3-dev
  libmicrohttpd-dev libssl-dev libisal-dev python3-yaml prometheus
  iproute2 procps tini
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
