#!/bin/sh
# Installs, from Debian's registry, whatever attnlab needs that this machine lacks.
# Idempotent: packages already present are not touched and apt is not even called.
#   scripts/install-deps.sh          build + demo dependencies
#   scripts/install-deps.sh --test   also what the tests use: PyTorch, numpy, Chromium, the Unicode data,
#                                    clang-14 with libFuzzer and its OpenMP runtime (`make fuzz`)
set -eu

want="build-essential cmake pkg-config libopenblas-openmp-dev libdnnl-dev libcjson-dev zlib1g-dev libcairo2-dev fonts-dejavu-core bible-kjv dataset-fashion-mnist openmpi-bin libopenmpi-dev"
if [ "${1:-}" = "--test" ]; then
    want="$want python3-torch python3-numpy chromium unicode-data clang-14 libclang-rt-14-dev libomp-14-dev"
fi

missing=""
for p in $want; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" != 0 ]; then
    echo "attnlab: install-deps: missing packages:$missing (run as root, or install them)" >&2
    exit 1
fi
echo "attnlab: installing:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
