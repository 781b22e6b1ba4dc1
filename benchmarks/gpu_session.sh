#!/bin/bash
# Issue 7's GPU figures in one command, for a device session (one H200, no network):
#   run(command="bash benchmarks/gpu_session.sh", carry=[".bench"], timeout_s=590)
# carrying the git-ignored .bench/ that
#   python benchmarks/setup_peers.py --dest .bench --only gpu --purejaxrl-git $PUREJAXRL_GIT
# fills: .bench/whl/ (gymnax, distrax and their pure-Python dependencies) and .bench/purejaxrl/
# (PureJaxRL's ppo.py and wrappers.py, unmodified; see PEERS_SETUP.md). BENCH, WHL and SITE
# (where the wheels are unpacked; a new temporary folder by default) can be set instead.
# Every step has its own time limit, so that one slow step cannot eat the others' time; the
# sum stays under 9 minutes. Results go to $OUT (or ./gpu_out): JSON lines and a log.
set -u
OUT=${OUT:-gpu_out}
BENCH=${BENCH:-.bench}
WHL=${WHL:-$BENCH/whl}
SITE=${SITE:-$(mktemp -d)}
mkdir -p "$OUT"
log() { echo "== $* ($(date -u +%T))" | tee -a "$OUT/log.txt"; }
log "machine"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> "$OUT/log.txt" 2>&1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >> "$OUT/log.txt" 2>&1
log "wheels for PureJaxRL"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WHL"/*.whl >> "$OUT/log.txt" 2>&1
# the GPU image has no Gymnasium, which trustrl imports: its wheel is among those in $SITE; trustrl
# itself runs from this checkout (an editable install would try to fetch its build backend)
export PYTHONPATH="$PWD:$SITE"
log "CUDA tests of the fast path"
timeout 100 python3 -m pytest -q -x tests/test_fast.py tests/test_torch_envs.py tests/test_callbacks.py -k "gpu or cuda" >> "$OUT/log.txt" 2>&1
log "trustrl PPO, eager and CUDA graph"
timeout 150 python3 benchmarks/gpu_fast.py --out "$OUT/gpu_fast.jsonl" >> "$OUT/log.txt" 2>&1
log "trustrl TRPO, CUDA graph"
timeout 50 python3 benchmarks/gpu_fast.py --algo trpo --modes graph --settings single,envs2048 \
    --out "$OUT/gpu_fast.jsonl" >> "$OUT/log.txt" 2>&1
log "PureJaxRL"
timeout 170 python3 benchmarks/purejaxrl_gpu.py \
    --purejaxrl "$BENCH/purejaxrl" --scale 0.5 > "$OUT/purejaxrl.jsonl" 2>> "$OUT/log.txt"
log "profile of trustrl PPO, eager"
timeout 70 python3 benchmarks/gpu_fast.py --settings single,envs2048 --modes eager --iterations 5 \
    --profile "$OUT/profile.txt" >> "$OUT/log.txt" 2>&1
# Atari, prepared and not run by default (hours: more than a device session holds): trustrl PPO
# with CleanRL's ppo_atari.py setting (--preset cleanrl) on Breakout for 10M frames = 2.5M steps
# (ATARI_STEPS=10000000 for CleanRL's own default, 40M frames), on the GPU, 8 CPU envs. The GPU
# image has no ale-py: put its Python 3.12 wheels in $WHL first (pip download --no-deps
# --only-binary=:all: --python-version 3.12 -d .bench/whl ale-py opencv-python-headless), then
# ATARI=1 bash benchmarks/gpu_session.sh
[ "${ATARI:-0}" = 1 ] && log "Atari Breakout, CleanRL's setting" && python3 -m pip install -q --no-index --no-deps --target "$SITE" "$WHL"/ale_py-*.whl "$WHL"/opencv_python_headless-*.whl >> "$OUT/log.txt" 2>&1 && python3 -m trustrl train ppo --env ALE/Breakout-v5 --preset cleanrl --seed 1 --total-steps "${ATARI_STEPS:-2500000}" --set device=cuda --set eval_every=100 --runs-dir "$OUT/atari" --quiet >> "$OUT/log.txt" 2>&1
log "done"
