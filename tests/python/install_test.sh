#!/usr/bin/env bash
# An installed commscope works on its own (issue 17, docs/install.md):
#   install_test.sh tree SRC BUILD PYTHON   `cmake --install` into a DESTDIR under /usr/local
#   install_test.sh deb  SRC BUILD PYTHON   `cpack -G DEB`, unpacked into an empty root (dpkg -x)
# then, in a private mount namespace where the source and build folders are hidden under empty
# tmpfs mounts and COMMSCOPE_PRESETS is unset: the installed CLI (its presets found beside it),
# the installed Python module (same JSON as the installed CLI), and a tiny CMake project that does
# find_package(commscope) and links commscope::core. Exit 77 (skipped) without root.
set -euo pipefail
mode=$1 src=$(realpath "$2") build=$(realpath "$3") py=$4

if [ "$(id -u)" -ne 0 ] || ! unshare --mount true 2>/dev/null; then
  echo "install_test: needs root for a private mount namespace; skipped"
  exit 77
fi

tmp=$(mktemp -d /tmp/commscope-install-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
pyver=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')

case "$mode" in
  tree)
    DESTDIR="$tmp/root" cmake --install "$build" --prefix /usr/local >/dev/null
    prefix="$tmp/root/usr/local"
    pydir="$prefix/lib/python$pyver/dist-packages"
    ;;
  deb)
    (cd "$tmp" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/pkg" >/dev/null)
    deb=$(ls "$tmp"/pkg/*.deb)
    depends=$(dpkg-deb -f "$deb" Depends)
    echo "install_test: $(basename "$deb"): Depends: $depends"
    for need in libc6 libfmt "python3 (>= $pyver"; do
      [[ $depends == *"$need"* ]] || { echo "install_test: Depends lacks $need" >&2; exit 1; }
    done
    # Every dependency is satisfiable on a machine of this kind (this one, by dpkg's own check).
    dpkg --dry-run --install "$deb" >/dev/null
    mkdir "$tmp/root"
    dpkg-deb -x "$deb" "$tmp/root"
    prefix="$tmp/root/usr"
    pydir="$prefix/lib/python3/dist-packages"
    ;;
  *)
    echo "install_test: expected tree or deb, got '$mode'" >&2
    exit 2
    ;;
esac

for f in bin/commscope share/commscope/presets/models/gpt2-large.json \
  include/commscope/spec/model.h lib/cmake/commscope/commscopeConfig.cmake; do
  [ -e "$prefix/$f" ] || { echo "install_test: $prefix/$f is missing" >&2; exit 1; }
done
ls "$pydir"/commscope/_commscope*.so "$pydir"/commscope/__init__.py >/dev/null

# What the checks need from the source tree, copied out before it is hidden.
cp "$src/data/traces/nccl_parser_config_nccl_data.json.gz" "$tmp/trace.json.gz"
cp -r "$src/tests/python/find_package" "$tmp/project"

cd "$tmp"
unshare --mount --propagation private env -u COMMSCOPE_PRESETS \
  TMP="$tmp" PREFIX="$prefix" PYDIR="$pydir" PY="$py" SRC="$src" BUILD="$build" bash -euo pipefail -c '
  mount -t tmpfs none "$SRC"
  if [ -d "$BUILD/CMakeFiles" ]; then mount -t tmpfs none "$BUILD"; fi
  # A real installation on this machine must not stand in for the one under test.
  for d in /usr/local/share/commscope /usr/share/commscope; do
    if [ -d "$d" ]; then mount -t tmpfs none "$d"; fi
  done
  [ ! -e "$SRC/presets" ] && [ ! -e "$BUILD/commscope" ]
  cli="$PREFIX/bin/commscope"
  "$cli" --version
  "$cli" presets networks | grep -q rdma-100g
  # Started through PATH (its name alone in argv[0]), as users start it.
  PATH="$PREFIX/bin:$PATH" commscope predict --network rdma-100g --format json > /dev/null
  "$cli" predict --model gpt2-large --network rdma-100g --nodes 2,4 --format json > cli.json
  "$cli" analyze trace.json.gz --format json > analyze.json
  PYTHONPATH="$PYDIR" "$PY" - <<PYEOF
import json, commscope
assert commscope.__file__.startswith("$PYDIR"), commscope.__file__
got = commscope.predict(model="gpt2-large", network="rdma-100g", nodes=[2, 4])
assert got == json.load(open("cli.json")), "module and CLI differ"
assert commscope.analyze("trace.json.gz") == json.load(open("analyze.json"))
assert len(commscope.load_trace("trace.json.gz")) > 0
try:
    commscope.predict(model="no-such-model")
    raise SystemExit("no error for an unknown model")
except commscope.Error as e:
    assert "no-such-model" in str(e)
print("module ok:", commscope.__file__)
PYEOF
  cmake -S project -B project/build -DCMAKE_PREFIX_PATH="$PREFIX" >/dev/null
  cmake --build project/build >/dev/null
  n=$(project/build/uses_commscope gpt2-large)
  want=$("$cli" describe --model gpt2-large --format json | "$PY" -c "import json,sys; print(json.load(sys.stdin)[\"params_total\"])")
  [ "$n" = "$want" ] || { echo "install_test: find_package project says $n parameters, the CLI $want" >&2; exit 1; }
  echo "find_package(commscope) project ok: gpt2-large has $n parameters"
'
echo "install_test $mode: ok"
