import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))  # so 'helper_envs:Env-v0' ids resolve in-process


@pytest.fixture
def cli_env():
    """Environment for `trustrl` subprocesses: helper envs importable, no terminal bar."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    return env
