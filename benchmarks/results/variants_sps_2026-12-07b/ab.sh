#!/bin/bash
# 8 alternating pairs of benchmarks/variants_sps.py (ppo, trpo, npg; 3 rounds), two checkouts
# with their own warm Numba caches, the new one first in odd pairs and second in even ones.
# usage: ab.sh OUTDIR NEW_CHECKOUT NEW_TAG OLD_CHECKOUT OLD_TAG
out=$1; new=$2; nt=$3; old=$4; ot=$5
mkdir -p "$out"
for i in 1 2 3 4 5 6 7 8; do
  if [ $((i % 2)) -eq 1 ]; then order="N O"; else order="O N"; fi
  for who in $order; do
    if [ "$who" = N ]; then dir=$new; tag=$nt; else dir=$old; tag=$ot; fi
    echo "pair $i $tag start $(date -u +%H:%M:%S) $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/load.log"
    (cd "$dir" && PYTHONPATH="$dir" nice -n 5 python benchmarks/variants_sps.py \
        --algos ppo trpo npg --rounds 3 > "$out/ab_${tag}_$i.out" 2>&1)
    echo "pair $i $tag end   $(date -u +%H:%M:%S) $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/load.log"
  done
done
echo done >> "$out/load.log"
