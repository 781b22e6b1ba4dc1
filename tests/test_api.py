"""Errors and API (issue 15, point 10): a missing Box2D / MuJoCo / ALE names the extra to
install, YAML config files and the names `import trustrl` exports (docs/api.md, rendered from
their docstrings, is checked by tests/test_docs_build.py and tests/test_docstrings.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
from test_bad_inputs import assert_one_line_error, run_cli

import trustrl
from trustrl.envs.make import check_env
from trustrl.settings.config import load_config_file
from trustrl.util.errors import ConfigError, EnvError

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--total-steps", "64", "--set", "num_envs=1", "--set", "num_steps=64",
        "--set", "eval_episodes=1", "--set", "eval_every=0", "--set", "tensorboard=false",
        "--set", "hidden_sizes=8", "--quiet", "--runs-dir", "runs"]


def assert_one_line(rc: int, err: str, *fragments: str) -> str:
    line = assert_one_line_error(rc, err, *fragments)
    assert line.startswith("trustrl: error:"), err
    return line


# ----- a missing env dependency names the extra ----------------------------------------------
def _raise_on(monkeypatch, env_id: str, exc: BaseException) -> None:
    real = gym.make

    def fake(id, *a, **k):  # noqa: A002 - gym.make's own parameter name
        if id == env_id:
            raise exc
        return real(id, *a, **k)

    monkeypatch.setattr(gym, "make", fake)


@pytest.mark.parametrize("env_id, extra, what", [
    ("LunarLander-v3", "box2d", "Box2D"), ("BipedalWalker-v3", "box2d", "Box2D"),
    ("HalfCheetah-v5", "mujoco", "MuJoCo"), ("Hopper-v5", "mujoco", "MuJoCo"),
])
def test_missing_dependency_names_the_extra(monkeypatch, tmp_path, env_id, extra, what):
    _raise_on(monkeypatch, env_id, gym.error.DependencyNotInstalled(f"{what} is not installed"))
    rc, _, err = run_cli(["train", "--env", env_id], tmp_path)
    line = assert_one_line(rc, err, env_id, f'pip install "trustrl[{extra}]"', what)
    assert "unknown env id" not in line and "did you mean" not in line
    assert not (tmp_path / "runs").exists()


def test_an_import_error_of_a_known_family_names_the_extra(monkeypatch):
    _raise_on(monkeypatch, "LunarLander-v3", ModuleNotFoundError("No module named 'Box2D'"))
    with pytest.raises(EnvError, match=r'needs Box2D.*pip install "trustrl\[box2d\]"'):
        check_env("LunarLander-v3")


def test_a_missing_dependency_of_another_env_gives_gymnasiums_line(monkeypatch):
    _raise_on(monkeypatch, "CartPole-v1", gym.error.DependencyNotInstalled("foo is missing\nmore"))
    with pytest.raises(EnvError, match=r"needs a package that is not installed: foo is missing$"):
        check_env("CartPole-v1")


def test_box2d_missing_here_through_the_real_gymnasium(tmp_path):
    try:
        import Box2D  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("Box2D is installed here")
    rc, _, err = run_cli(["train", "--env", "LunarLander-v3"], tmp_path)
    assert_one_line(rc, err, 'pip install "trustrl[box2d]"')


def test_ale_ids_without_ale_py_name_the_atari_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ale_py", None)  # import ale_py raises ImportError
    monkeypatch.setattr(gym.envs.registration, "registry", {
        k: v for k, v in gym.registry.items() if not k.startswith("ALE/")})
    monkeypatch.setattr(gym, "registry", gym.envs.registration.registry)
    rc, _, err = run_cli(["train", "--env", "ALE/Pong-v5"], tmp_path)
    assert_one_line(rc, err, "ALE/Pong-v5", 'pip install "trustrl[atari]"', "ale-py")


def test_ale_py_installed_but_not_imported_is_imported(monkeypatch, tmp_path):
    """Gymnasium 1.x registers the ALE ids when ale_py is imported: check_env imports it."""
    (tmp_path / "ale_py.py").write_text(
        "import gymnasium\n"
        "gymnasium.register(id='ALE/Fake-v5',\n"
        "                   entry_point='gymnasium.envs.classic_control.cartpole:CartPoleEnv')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "ale_py", raising=False)
    # with the [atari] extra installed, an earlier test may have registered the real ALE ids
    monkeypatch.setattr(gym.envs.registration, "registry", {
        k: v for k, v in gym.registry.items() if not k.startswith("ALE/")})
    monkeypatch.setattr(gym, "registry", gym.envs.registration.registry)
    assert not any(k.startswith("ALE/") for k in gym.registry)
    try:
        spec = check_env("ALE/Fake-v5")
        assert spec.obs_dim == 4 and spec.action.n == 2
    finally:
        gym.registry.pop("ALE/Fake-v5", None)
        sys.modules.pop("ale_py", None)


def test_pyproject_defines_the_extras_the_errors_name():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert {"box2d", "mujoco", "atari"} <= set(extras)


# ----- YAML config files ----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["my.yaml", "my.yml"])
def test_yaml_config_file_trains(tmp_path, name):
    (tmp_path / name).write_text("# a comment\nlr: 0.001\nseed: 3\nhidden_sizes: [8]\n")
    assert load_config_file(tmp_path / name) == {"lr": 0.001, "seed": 3, "hidden_sizes": [8]}
    rc, out, err = run_cli(["train", "--config", name, *TINY], tmp_path)
    assert rc == 0 and "run:" in out, err
    cfg = next((tmp_path / "runs").rglob("config.json")).read_text()
    assert '"lr": 0.001' in cfg and '"seed": 3' in cfg


@pytest.mark.parametrize("text, fragment", [
    ("lr: [1, 2\n", "cannot parse config file bad.yaml"),
    ("- lr\n- 0.1\n", "must hold key = value pairs"),
    ("lr:\n  x: 1\n", "lr is a table"),
    ("", "must hold key = value pairs"),
    ("1: 2\n", "key 1 is not a name"),
    ("a: &x [1, 2]\nb: *x\n", "YAML aliases"),
    ("lr: 2020-01-01\n", "bad value for lr"),
    ("lr: 0.1\nbogus: 1\n", "unknown config key 'bogus'"),
])
def test_bad_yaml_config_files_are_one_line(tmp_path, text, fragment):
    (tmp_path / "bad.yaml").write_text(text)
    rc, _, err = run_cli(["train", "--config", "bad.yaml"], tmp_path)
    assert_one_line(rc, err, fragment)


def test_yaml_python_tags_are_refused_not_run(tmp_path):
    (tmp_path / "evil.yaml").write_text(
        'lr: !!python/object/apply:os.system ["touch pwned"]\n')
    (tmp_path / "evil2.yml").write_text(
        "lr: !!python/object:trustrl.settings.config.PPOConfig {}\n")
    for name in ("evil.yaml", "evil2.yml"):
        rc, _, err = run_cli(["train", "--config", name], tmp_path)
        assert_one_line(rc, err, f"cannot parse config file {name}", "python/object")
    assert not (tmp_path / "pwned").exists()


def test_yaml_binary_file_is_one_line(tmp_path):
    (tmp_path / "bin.yml").write_bytes(bytes(range(256)))
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        load_config_file(tmp_path / "bin.yml")


# ----- exports --------------------------------------------------------------------------------
def test_every_name_of_all_resolves():
    for name in trustrl.__all__:
        assert getattr(trustrl, name) is not None, name
    ns: dict = {}
    exec("from trustrl import *", ns)  # noqa: S102 - our own package
    assert set(trustrl.__all__) <= set(ns)
    assert len(set(trustrl.__all__)) == len(trustrl.__all__)


def test_all_holds_every_config_class_and_the_public_functions():
    from trustrl.settings.config import CONFIGS, RunConfig

    want = {c.__name__ for c in CONFIGS.values()} | {"RunConfig", "make_config", "train",
                                                     "resume", "Agent", "evaluate"}
    assert want <= set(trustrl.__all__)
    assert trustrl.RunConfig is RunConfig


def test_import_trustrl_stays_cheap():
    code = ("import sys, trustrl; heavy = [m for m in ('tensorboard', 'ray', 'matplotlib', "
            "'yaml', 'torch.utils.tensorboard', 'trustrl.cli') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"
