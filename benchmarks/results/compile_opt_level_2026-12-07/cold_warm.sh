#!/usr/bin/env bash
# The README's command with the fused iteration compiled, on an empty Numba cache and then warm
# (twice), from the checkout TREE, pinned to CORE; prints the whole command's seconds and
# metrics.csv's last wall_time (training time) with the final greedy return.
#   CORE=1 ./cold_warm.sh TREE TAG [NUMBA_OPT]   (NUMBA_OPT empty: not set)
set -u
tree=$1; tag=$2; opt=${3:-}
work=${WORK:-$(mktemp -d)}
rm -rf "$work/nc_$tag" "$work/runs_$tag"; mkdir -p "$work/runs_$tag"
for k in cold warm1 warm2; do
  t0=$(date +%s.%N)
  env ${opt:+NUMBA_OPT=$opt} PYTHONPATH="$tree" NUMBA_CACHE_DIR="$work/nc_$tag" \
    TRUSTRL_COMPILE=always taskset -c "${CORE:-1}" python -m trustrl train --env CartPole-v1 \
    --set grad_backend=compiled --quiet --runs-dir "$work/runs_$tag/$k" > "$work/log_${tag}_$k.txt" 2>&1
  t1=$(date +%s.%N)
  wt=$(python -c "import csv,glob; r=list(csv.DictReader(open(glob.glob('$work/runs_$tag/$k/*/metrics.csv')[0]))); print(round(float(r[-1]['wall_time']),2), r[-1]['eval_return_mean'])")
  echo "$tag $k whole=$(python -c "print(round($t1-$t0,1))") train_wall,eval=$wt"
done
