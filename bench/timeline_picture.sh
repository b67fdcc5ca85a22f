#!/usr/bin/env bash
# Regenerates bench/timeline_2ranks.png, the README's picture of the timeline: the main job
# (examples/train_fashion_mnist, the MLP on Fashion-MNIST) for a few steps on 2 MPI ranks with
# FJIT_TIMELINE, the ranks' files merged by fjit_timeline, its HTML view of the last steps, and
# a screenshot of that page by headless Chromium. Not run by CI (needs mpiexec, chromium and the
# data set; `apt-get install chromium dataset-fashion-mnist`).
# usage: bench/timeline_picture.sh [BUILD_DIR] [OUT_PNG] [STEPS_SHOWN]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
out=${2:-$here/timeline_2ranks.png}
shown=${3:-2}
work=$(mktemp -d "${TMPDIR:-/tmp}/fjit_timeline_picture.XXXXXX")
trap 'rm -rf "$work"' EXIT
export FJIT_TIMELINE=$work/t.json FJIT_TIMELINE_STEPS=4
mpiexec -n 2 --allow-run-as-root --oversubscribe --bind-to none -x FJIT_TIMELINE \
  -x FJIT_TIMELINE_STEPS "$build/examples/train_fashion_mnist" --epochs 1 --max-steps 8 \
  --log-every 0 > "$work/train.log" 2>&1 || { cat "$work/train.log"; exit 1; }
tool=$build/examples/fjit_timeline
"$tool" merge "$work/merged.json" "$work/t.json" "$work/t.rank1.json"
"$tool" html "$work/view.html" "$work/merged.json" --last-steps "$shown" --width 1400 \
  --title "train_fashion_mnist (MLP 784-512-256-10, batch 128) on 2 MPI ranks: the last $shown steps"
height=$(grep -o '<svg[^>]*height="[0-9]*"' "$work/view.html" | grep -o 'height="[0-9]*"' | tr -dc 0-9)
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --screenshot="$out" \
  --window-size=1400,"$height" "file://$work/view.html" > "$work/chromium.log" 2>&1 ||
  { cat "$work/chromium.log"; exit 1; }
echo "wrote $out ($(stat -c %s "$out") bytes) from $work/merged.json"
