"""The adaptive KL coefficient of PPO-penalty (Schulman et al., 2017, section 4)."""

from __future__ import annotations


class AdaptiveKL:
    """beta <- beta / 2 when d < d_targ / 1.5; beta <- 2 beta when d > 1.5 d_targ.

    d is the mean KL(pi_old || pi) measured after an update. Between the two thresholds beta
    stays. The rule reacts one update late, which is its weakness (Exercise 9.6).
    """

    def __init__(self, beta: float = 1.0, target: float = 0.01):
        if target <= 0:
            raise ValueError("the KL target must be positive")
        self.beta, self.target = float(beta), float(target)

    def update(self, kl: float) -> float:
        if kl < self.target / 1.5:
            self.beta /= 2.0
        elif kl > self.target * 1.5:
            self.beta *= 2.0
        return self.beta

    def state_dict(self) -> dict[str, float]:
        return {"beta": self.beta, "target": self.target}

    def load_state_dict(self, s: dict[str, float]) -> None:
        self.beta, self.target = float(s["beta"]), float(s["target"])
