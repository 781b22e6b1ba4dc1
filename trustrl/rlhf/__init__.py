"""PPO and GRPO for a tiny causal language model (issue 9): see docs/rlhf.md."""
