"""The fast path: PPO for a population of seeds with batched torch envs, all on one device.

`trustrl train --vector torch` runs one seed through it, `trustrl train --seeds 0-255` many.
rng.py (counter-based random numbers), popnet.py (P actor-critics as one flat tensor),
adam.py (Adam on [P, D] with a per-member mask), engine.py (rollout, GAE, update, evaluation),
run.py (run folders, checkpoints, resume).
"""
