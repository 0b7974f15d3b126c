#!/usr/bin/env bash
# Installs with apt-get exactly the Debian packages commscope needs that are missing, and
# nothing when all are there (idempotent). docs/DEPENDENCIES.md says what each one is for.
set -euo pipefail

PACKAGES=(
  g++ cmake make             # toolchain
  libcli11-dev               # command line
  libfmt-dev                 # formatting
  nlohmann-json3-dev         # configs and result documents
  libsimdjson-dev            # reading traces
  libtomlplusplus-dev        # torchtitan job files (TOML)
  zlib1g-dev                 # gzip traces
  libopenmpi-dev openmpi-bin # bench and train over MPI
  libopenblas-dev            # train: matrix products
  iproute2                   # bench/train --emulate: ip netns, veth, bridge, tc
  libgtest-dev libgmock-dev  # tests
  clang-format               # the formatting check the test suite runs
  libjs-chart.js             # HTML reports: Chart.js, inlined into the binary at build time
  chromium                   # the browser test of the HTML reports (headless)
  python3-dev pybind11-dev   # the Python module (python/, docs/python.md)
  python3-pytest             # its tests
  python3-numpy python3-matplotlib # the Python example (docs/examples/) plots with matplotlib
  python3-pandas             # the module's optional .to_pandas(), tested
  dpkg-dev                   # cpack -G DEB: dpkg-shlibdeps finds the package's dependencies
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
