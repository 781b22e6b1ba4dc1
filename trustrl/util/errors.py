"""User-facing errors. Each carries one line that the CLI prints as it is."""

from __future__ import annotations


class TrustrlError(Exception):
    """Base class: bad input or a run that cannot go on. The message is one clear line."""


class ConfigError(TrustrlError):
    """A config value, key or file that cannot be used."""


class EnvError(TrustrlError):
    """An env id that does not exist or a space trustrl cannot handle."""


class RunError(TrustrlError):
    """A run folder or checkpoint that cannot be read."""


class ObservationError(TrustrlError, ValueError):
    """An observation given to Agent.act or a model's predict that does not fit the agent's
    observation space; names the shape (or keys, values) expected."""


class NonFiniteError(TrustrlError):
    """The env returned NaN or inf; names the env index and the step."""

    def __init__(self, what: str, env_index: int, step: int):
        self.what, self.env_index, self.step = what, env_index, step
        super().__init__(
            f"non-finite {what} from env {env_index} at global step {step}; "
            "the run folder is kept and can be resumed from its last checkpoint"
        )


class NotCompilable(TrustrlError):
    """An algorithm's objective the compiled backend cannot compile (torch-only code, a
    lambda): the caller runs it eagerly instead. Raised before any parameter moved."""
