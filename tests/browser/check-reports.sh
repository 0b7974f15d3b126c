#!/usr/bin/env bash
# The browser test of the HTML reports (docs/report.md): makes each report commscope writes
# (predict --html, analyze --html, train --html when the trainer is built, report seeds, report DIR on the
# characterize fixture and on a folder characterize --quick measures here), opens it in headless Chromium (Debian's package) and fails on
#   - any console message (the pages log nothing when all is well: a script error, a blocked
#     load or a chart that drew nothing all show up there),
#   - a chart that did not render: every <figure class="chart"> must carry data-rendered="true",
#     which the page script sets after checking that the chart has data elements and painted
#     pixels, and <body data-charts-rendered> must equal data-charts,
#   - Chromium missing (a failure, not a skip: scripts/install-deps.sh installs it).
# A full-page screenshot of each report is kept as ARTEFACTS/<name>.png beside the report.
#
# Usage: check-reports.sh COMMSCOPE_BIN SOURCE_DIR ARTEFACTS [train]
set -uo pipefail
bin=$1 src=$2 out=$3 with_train=${4:-}

fail() {
  echo "browser_report_test: FAIL: $*" >&2
  exit 1
}

browser=""
for b in chromium chromium-browser; do
  if command -v "$b" >/dev/null 2>&1; then browser=$(command -v "$b"); break; fi
done
[ -n "$browser" ] || fail "chromium is not installed, so the HTML reports cannot be checked (apt-get install chromium; scripts/install-deps.sh does)"
[ -x "$bin" ] || fail "$bin: not built"

rm -rf "$out" && mkdir -p "$out" || fail "$out: cannot create"
work=$(mktemp -d) || fail "cannot create a temporary folder"
trap 'rm -rf "$work"' EXIT
export COMMSCOPE_PRESETS="$src/presets"

# ---- the reports ----
"$bin" predict --dp 1,2,4,8 --pp 1,2 --html "$out/predict.html" >"$work/predict.txt" ||
  fail "predict --html failed"
"$bin" analyze "$src/data/traces/trace_filter_sampled_rank-0.json.gz" \
  "$src/data/traces/trace_filter_sampled_rank-1.json.gz" --html "$out/analyze.html" \
  >"$work/analyze.txt" || fail "analyze --html failed"
cp -r "$src/tests/data/characterize" "$work/characterize" || fail "cannot copy the fixture"
"$bin" report "$work/characterize" -o "$out/report.html" 2>"$work/report.txt" ||
  fail "report failed: $(cat "$work/report.txt")"
(cd "$work" && "$bin" report seeds -o "$out/seeds.html" 2>"$work/seeds.txt") ||
  fail "report seeds failed: $(cat "$work/seeds.txt")"
reports=(predict analyze report seeds)
if [ "$with_train" = train ]; then
  "$bin" train --ranks 2 --steps 3 --html "$out/train.html" >"$work/train.txt" 2>&1 ||
    fail "train --html failed: $(tail -5 "$work/train.txt")"
  reports+=(train)
  # A real characterize folder, not the fixture: a small quick run measured here (emulated
  # nodes as root, else this machine's slots as a one-node cluster), its own report.html and
  # `commscope report DIR` rebuilt from the folder.
  if [ "$(id -u)" = 0 ]; then
    where=(--emulate rdma-100g,nodes=2 --strategies ddp,tp2)
  else
    where=(--hostfile "$src/tests/data/mpi/hostfile" --nodes 1 --strategies ddp,tp2)
  fi
  "$bin" characterize --quick "${where[@]}" --ranks 2 --steps 3 --warmup 1 --no-progress \
    -o "$work/char-real" >"$work/char-real.txt" 2>&1 ||
    fail "characterize --quick failed: $(tail -5 "$work/char-real.txt")"
  cp "$work/char-real/report.html" "$out/characterize.html" || fail "characterize: no report.html"
  "$bin" report "$work/char-real" -o "$out/characterize-report.html" 2>"$work/char-report.txt" ||
    fail "report of the characterize folder failed: $(cat "$work/char-report.txt")"
  reports+=(characterize characterize-report)
fi

# ---- each report in headless Chromium ----
flags=(--headless --no-sandbox --disable-gpu --disable-quic --no-first-run
  --disable-background-networking --disable-component-update --disable-sync
  --disable-extensions --host-resolver-rules="MAP * ~NOTFOUND" --hide-scrollbars
  --virtual-time-budget=10000)
# check NAME PAGE: opens PAGE; prints what is wrong and returns 1, or returns 0.
check() {
  local name=$1 page=$2 bad=0
  local profile
  profile=$(mktemp -d "$work/profile-XXXXXX")
  timeout 120 "$browser" "${flags[@]}" --user-data-dir="$profile" --enable-logging=stderr --v=0 \
    --dump-dom "file://$page" >"$work/$name.dom" 2>"$work/$name.log" ||
    fail "$name: chromium failed: $(grep -v dbus "$work/$name.log" | tail -3)"
  local console charts rendered figures marked
  console=$(grep -E ':CONSOLE[:(]' "$work/$name.log" || true)
  charts=$(grep -o 'data-charts="[0-9]*"' "$work/$name.dom" | head -1 | grep -o '[0-9]*')
  rendered=$(grep -o 'data-charts-rendered="[0-9]*"' "$work/$name.dom" | head -1 | grep -o '[0-9]*')
  figures=$(grep -o '<figure class="chart"' "$work/$name.dom" | wc -l)
  marked=$(grep -o '<figure class="chart" id="chart-[0-9]*" data-rendered="true"' "$work/$name.dom" | wc -l)
  if [ -n "$console" ]; then
    echo "browser_report_test: $name: console messages:"
    echo "$console"
    bad=1
  fi
  if [ -z "$charts" ] || [ "$charts" -lt 1 ] || [ "${rendered:-x}" != "$charts" ] ||
    [ "$figures" -ne "$charts" ] || [ "$marked" -ne "$charts" ]; then
    echo "browser_report_test: $name: ${charts:-no} charts, $figures figures, ${rendered:-none} rendered, $marked marked rendered"
    bad=1
  fi
  CHARTS=${charts:-1}
  return $bad
}

# The check itself must catch a page whose charts do not draw: a copy of the predict page with
# Chart.js's constructor broken.
sed 's/new Chart(canvas, config(c))/new Chart(null, config(c))/' "$out/predict.html" \
  >"$work/broken.html"
cmp -s "$out/predict.html" "$work/broken.html" && fail "could not make the broken page"
if check broken "$work/broken.html" >/dev/null; then
  fail "a page whose charts cannot draw passed the check"
fi

status=0
for name in "${reports[@]}"; do
  page="$out/$name.html"
  [ -s "$page" ] || fail "$page: not written"
  check "$name" "$page" >&2 || status=1
  # The screenshot: tall enough for every chart (about 560 px each) and the tables.
  height=$((900 + 600 * CHARTS))
  ((height > 16000)) && height=16000
  profile=$(mktemp -d "$work/profile-XXXXXX")
  timeout 120 "$browser" "${flags[@]}" --user-data-dir="$profile" --window-size=1280,$height \
    --screenshot="$out/$name.png" "file://$page" >/dev/null 2>&1 ||
    fail "$name: the screenshot failed"
  [ -s "$out/$name.png" ] || fail "$name: no screenshot"
  [ $status -eq 0 ] && echo "browser_report_test: $name: $CHARTS charts rendered, no console message; screenshot $out/$name.png"
done
exit $status
