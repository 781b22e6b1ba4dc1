import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))  # so 'helper_envs:Env-v0' ids resolve in-process


@pytest.fixture(scope="session", autouse=True)
def _checkpoint_key(tmp_path_factory):
    """The checkpoint signing key of the test session in a temporary folder, not in the
    user's ~/.config (subprocesses inherit it through the environment)."""
    if "TRUSTRL_KEY_FILE" not in os.environ:
        os.environ["TRUSTRL_KEY_FILE"] = str(tmp_path_factory.mktemp("key") / "checkpoint.key")
    yield


@pytest.fixture
def cli_env():
    """Environment for `trustrl` subprocesses: helper envs importable, no terminal bar."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    return env


# a new run's learner does not depend on what this machine's Numba cache holds (trustrl.train:
# TRUSTRL_COMPILE; tests/test_cold_start.py unsets it where it tests the rule itself)
os.environ.setdefault("TRUSTRL_COMPILE", "always")
