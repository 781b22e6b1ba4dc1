#!/bin/bash
# What each first-run compile announcement takes: every run on core 1 with an empty Numba
# cache of its own, stderr's "trustrl:" lines kept (announced.log).
#   bash announced.sh TREE SCRATCH     (TREE: a checkout; SCRATCH: an empty folder)
TREE=$1; SCRATCH=$2
run() {  # tag, command...
  tag=$1; shift
  mkdir -p "$SCRATCH/cache_$tag"
  t0=$(date +%s.%N)
  NUMBA_CACHE_DIR="$SCRATCH/cache_$tag" PYTHONPATH="$TREE" taskset -c 1 "$@" \
    --runs-dir "$SCRATCH/runs_$tag" --quiet > "$SCRATCH/$tag.out" 2> "$SCRATCH/$tag.err"
  echo "== $tag rc=$? whole=$(python -c "import time;print(round(time.time()-$t0,1))")"
  grep "trustrl:" "$SCRATCH/$tag.err"
}
run fused python -m trustrl train ppo --env CartPole-v1 --total-steps 10000 --set grad_backend=compiled
run pg python -m trustrl train pg --env CartPole-v1 --total-steps 10000 --set grad_backend=compiled
run trpo python -m trustrl train trpo --env CartPole-v1 --total-steps 4096 --set grad_backend=compiled
run gym python -m trustrl train ppo --env Pendulum-v1 --total-steps 4096 --set grad_backend=compiled --set vector=sync
