"""Build the peer environments of trustrl's benchmarks from the package registries.

    python benchmarks/setup_peers.py --dest $PEERS --cleanrl-git CLEANRL_CLONE \\
        --purejaxrl-git PUREJAXRL_CLONE [--only sb3,cleanrl,cleanrl-atari,purejaxrl,gpu]
        [--python PYTHON]

Run from anywhere (standard library only). DEST is a folder of your choice outside the
repository; afterwards it holds:

    sb3-venv/          torch 2.13.0 (CPU) + stable-baselines3, for peers_cpu.py / time_to_solve.py
    cleanrl-venv/      torch 2.13.0 (CPU) + CleanRL's pinned requirements
    cleanrl/           CleanRL's ppo.py, ppo_continuous_action.py and LICENSE, unmodified
    cleanrl-atari-venv/  (--only cleanrl-atari) the same plus ale-py 0.9.0 and OpenCV, for
                       benchmarks/atari_cpu.py
    cleanrl-atari/     CleanRL's ppo_atari.py, cleanrl_utils/atari_wrappers.py and LICENSE
    purejaxrl-venv/    jax 0.10.2 (CPU), gymnax 0.0.9, flax, optax, distrax (no torch: not used)
    purejaxrl/         PureJaxRL's ppo.py, wrappers.py and LICENSE, unmodified
    whl/               (--only gpu) Python 3.12 wheels of gymnax, distrax & co. for the GPU machine
    versions/NAME.txt  `pip freeze` of every venv built
    logs/NAME.log      pip's full output

CLEANRL_CLONE and PUREJAXRL_CLONE are clones (or bare mirrors) of github.com/vwxyzjn/cleanrl
and github.com/luchris429/purejaxrl holding the commits pinned below; the scripts are taken with
`git -C CLONE show COMMIT:PATH`, byte for byte. Only the peers named by --only are built
(default: sb3, cleanrl, purejaxrl; `gpu` is the PureJaxRL bundle of benchmarks/gpu_session.sh).
A venv that exists is reused (pip installs what is missing); delete it to start anew.

torch goes first, alone, as `torch==2.13.0` (a looser spec can pull a multi-GB CUDA build);
where the default index serves only CUDA builds, add
`--torch-index https://download.pytorch.org/whl/cpu`.

Each peer ends with one check line, its smallest smoke run: SB3 `peer_sb3.py solve` for 2,048
steps, CleanRL ppo.py for 2,048 steps and ppo_continuous_action.py for 2,048 steps (in a
temporary folder: they write ./runs), ppo_atari.py for 2,048 steps, PureJaxRL
`purejaxrl_gpu.py --tiny --runs default`.
Exit status 0 when every check passed, 1 when a build or a check failed, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

TORCH = "torch==2.13.0"
CLEANRL_COMMIT = "fe8d8a03c41a7ef5b523e2e354bd01c363e786bb"  # 2026-04-20
PUREJAXRL_COMMIT = "31756b197773a52db763fdbe6d635e4b46522a73"  # 2024-09-09

# The versions every figure in RESULTS.md was measured with (PEERS_SETUP.md says why).
# Box2D and MuJoCo for the zoo-setting runs (mujoco_cpu.py, peer_sb3.py zoo).
SB3_PINS = ["stable-baselines3==2.9.2", "gymnasium[box2d,mujoco]==1.4.0", "numpy==2.4.6",
            "box2d==2.3.10", "mujoco==4.0.0"]
# CleanRL's requirements/requirements.txt where they install on Python 3.11: gymnasium 0.29.1,
# tyro 0.5.10, numpy < 2 (as gymnasium 0.29 needs); tensorboard not at its 2.11.2 (it wants
# protobuf 3.20 and an old setuptools): the version that resolved.
CLEANRL_PINS = ["gymnasium==0.29.1", "numpy==1.26.4", "tyro==0.5.10", "tensorboard==2.21.0"]
CLEANRL_FILES = ["cleanrl/ppo.py", "cleanrl/ppo_continuous_action.py", "LICENSE"]
# ppo_atari.py: ale-py 0.9 ships the ROMs (0.8.1, CleanRL's pin, downloads them through AutoROM
# at install: not from the package registry); it registers the Atari ids when imported, so the
# venv imports it at start (ale_register.pth), in place of 0.8's shimmy plugin
CLEANRL_ATARI_PINS = CLEANRL_PINS + ["ale-py==0.9.0", "opencv-python-headless==4.11.0.86"]
CLEANRL_ATARI_FILES = ["cleanrl/ppo_atari.py", "LICENSE"]
CLEANRL_ATARI_UTILS = ["cleanrl_utils/__init__.py", "cleanrl_utils/atari_wrappers.py"]
# gymnax 0.0.9, not 1.x: 1.0 returns six values from step(), PureJaxRL's wrappers unpack five.
# jax 0.10.2 is the newest jax pip offers to Python 3.11; flax 0.12.8 the newest flax for it.
PUREJAXRL_PINS = ["jax[cpu]==0.10.2", "jaxlib==0.10.2", "gymnax==0.0.9", "flax==0.12.8",
                  "optax==0.2.8", "chex==0.1.92", "distrax==0.1.9",
                  "tfp-nightly==0.26.0.dev20261027", "dm-tree==0.1.10"]
PUREJAXRL_FILES = ["purejaxrl/ppo.py", "purejaxrl/wrappers.py", "LICENSE"]
# Wheels for the GPU machine (Python 3.12, jax/flax/optax/chex already there, no network).
GPU_WHEELS = ["gymnax==0.0.9", "distrax==0.1.9", "tfp-nightly==0.26.0.dev20261027",
              "dm-tree==0.1.10", "gast==0.7.0", "decorator==5.3.1", "gymnasium==1.3.0",
              "farama-notifications==0.0.6"]
GPU_PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]

PEERS = ("sb3", "cleanrl", "cleanrl-atari", "purejaxrl", "gpu")
DEFAULT_PEERS = ("sb3", "cleanrl", "purejaxrl")


class Failed(Exception):
    """A build step or a check failed (exit 1)."""


def say(msg: str) -> None:
    print(msg, flush=True)


def run_logged(cmd: list[str], log: Path, *, cwd: Path | None = None,
               env: dict[str, str] | None = None, timeout: float = 3600) -> None:
    """Run cmd with its output appended to log; on failure raise with the log's last lines."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        try:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=cwd, env=env,
                                timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        except OSError as e:
            rc = f"could not start ({e.strerror})"
    if rc != 0:
        tail = log.read_text(errors="replace").splitlines()[-8:]
        raise Failed(f"`{' '.join(cmd[:4])} ...` failed ({rc}); last lines of {log}:\n  "
                     + "\n  ".join(tail))


class Builder:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.dest: Path = a.dest
        self.logs = self.dest / "logs"
        self.versions = self.dest / "versions"

    # -- pieces ----------------------------------------------------------------------------
    def venv(self, name: str, *, torch: bool, pins: list[str]) -> Path:
        path = self.dest / f"{name}-venv"
        log = self.logs / f"{name}.log"
        py = path / "bin" / "python"
        if py.exists():
            say(f"[{name}] reusing {path}")
        else:
            say(f"[{name}] creating {path} with {self.a.python}")
            run_logged([self.a.python, "-m", "venv", str(path)], log)
        pip = [str(py), "-m", "pip", "install", "--disable-pip-version-check"]
        if torch:
            extra = ["--index-url", self.a.torch_index] if self.a.torch_index else []
            say(f"[{name}] pip install {TORCH}{' ' + ' '.join(extra) if extra else ''}")
            run_logged(pip + extra + [TORCH], log)
            pins = [TORCH] + pins  # keeps pip from moving torch afterwards
        say(f"[{name}] pip install {' '.join(pins)}")
        run_logged(pip + pins, log)
        self.freeze(name, py)
        return py

    def freeze(self, name: str, py: Path) -> None:
        out = subprocess.run([str(py), "-m", "pip", "freeze", "--all"], capture_output=True,
                             text=True)
        self.versions.mkdir(parents=True, exist_ok=True)
        (self.versions / f"{name}.txt").write_text(out.stdout)
        wanted = {"torch", "stable-baselines3", "stable_baselines3", "gymnasium", "numpy",
                  "tyro", "tensorboard", "jax", "jaxlib", "gymnax", "flax", "optax", "chex",
                  "distrax", "tfp-nightly", "ale-py", "opencv-python-headless"}
        got = [ln for ln in out.stdout.splitlines() if ln.split("==")[0].lower() in wanted]
        say(f"[{name}] resolved: {', '.join(got)} (all: {self.versions / (name + '.txt')})")

    def extract(self, name: str, clone: Path, commit: str, files: list[str], folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for f in files:
            out = subprocess.run(["git", "-C", str(clone), "show", f"{commit}:{f}"],
                                 capture_output=True)
            if out.returncode != 0:
                raise Failed(f"git -C {clone} show {commit}:{f} failed: "
                             f"{out.stderr.decode(errors='replace').strip()}")
            (folder / Path(f).name).write_bytes(out.stdout)
        say(f"[{name}] {', '.join(Path(f).name for f in files)} from {commit[:12]} -> {folder}")

    def check(self, name: str, what: str, cmd: list[str], *, cwd: Path,
              timeout: float = 600, env: dict[str, str] | None = None) -> str:
        env = dict(env or os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        t0 = time.monotonic()
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env,
                                 timeout=timeout)
        except subprocess.TimeoutExpired:
            raise Failed(f"check {name}: {what} did not finish in {timeout:.0f} s") from None
        took = time.monotonic() - t0
        log = self.logs / f"{name}-check.log"
        with log.open("a") as f:
            f.write(f"$ {' '.join(cmd)}\n{out.stdout}{out.stderr}\n")
        if out.returncode != 0:
            tail = (out.stdout + out.stderr).strip().splitlines()[-5:]
            raise Failed(f"check {name}: {what} exited {out.returncode}; last lines:\n  "
                         + "\n  ".join(tail))
        return f"{what} ran ({took:.1f} s)"

    # -- peers -----------------------------------------------------------------------------
    def sb3(self) -> str:
        py = self.venv("sb3", torch=True, pins=SB3_PINS)
        with tempfile.TemporaryDirectory() as tmp:
            line = self.check("sb3", "peer_sb3.py solve, 2,048 steps",
                              [str(py), str(HERE / "peer_sb3.py"), "solve", "--seed", "1",
                               "--eval-steps", "1024", "--max-steps", "2048"], cwd=Path(tmp))
        return line

    def cleanrl(self) -> str:
        folder = self.dest / "cleanrl"
        self.extract("cleanrl", self.a.cleanrl_git, CLEANRL_COMMIT, CLEANRL_FILES, folder)
        py = self.venv("cleanrl", torch=True, pins=CLEANRL_PINS)
        lines = []
        with tempfile.TemporaryDirectory() as tmp:
            lines.append(self.check("cleanrl", "ppo.py --total-timesteps 2048",
                                    [str(py), str(folder / "ppo.py"), "--total-timesteps",
                                     "2048"], cwd=Path(tmp)))
            lines.append(self.check("cleanrl", "ppo_continuous_action.py --env-id Pendulum-v1 "
                                    "--total-timesteps 2048",
                                    [str(py), str(folder / "ppo_continuous_action.py"),
                                     "--env-id", "Pendulum-v1", "--total-timesteps", "2048"],
                                    cwd=Path(tmp)))
        return "; ".join(lines)

    def cleanrl_atari(self) -> str:
        folder = self.dest / "cleanrl-atari"
        self.extract("cleanrl-atari", self.a.cleanrl_git, CLEANRL_COMMIT, CLEANRL_ATARI_FILES,
                     folder)
        self.extract("cleanrl-atari", self.a.cleanrl_git, CLEANRL_COMMIT, CLEANRL_ATARI_UTILS,
                     folder / "cleanrl_utils")
        py = self.venv("cleanrl-atari", torch=True, pins=CLEANRL_ATARI_PINS)
        site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                               "['purelib'])"], capture_output=True, text=True, check=True)
        (Path(site.stdout.strip()) / "ale_register.pth").write_text("import ale_py\n")
        env = dict(os.environ, PYTHONPATH=str(folder))
        with tempfile.TemporaryDirectory() as tmp:
            return self.check("cleanrl-atari", "ppo_atari.py --total-timesteps 2048",
                              [str(py), str(folder / "ppo_atari.py"), "--total-timesteps",
                               "2048", "--no-cuda"], cwd=Path(tmp), env=env)

    def purejaxrl(self) -> str:
        folder = self.dest / "purejaxrl"
        self.extract("purejaxrl", self.a.purejaxrl_git, PUREJAXRL_COMMIT, PUREJAXRL_FILES,
                     folder)
        py = self.venv("purejaxrl", torch=False, pins=PUREJAXRL_PINS)
        with tempfile.TemporaryDirectory() as tmp:
            line = self.check("purejaxrl", "purejaxrl_gpu.py --tiny --runs default (CPU)",
                              [str(py), str(HERE / "purejaxrl_gpu.py"), "--purejaxrl",
                               str(folder), "--tiny", "--runs", "default"], cwd=Path(tmp))
        return line

    def gpu(self) -> str:
        folder = self.dest / "purejaxrl"
        self.extract("gpu", self.a.purejaxrl_git, PUREJAXRL_COMMIT, PUREJAXRL_FILES, folder)
        whl = self.dest / "whl"
        whl.mkdir(parents=True, exist_ok=True)
        cmd = [self.a.python, "-m", "pip", "download", "--disable-pip-version-check",
               "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
               "--implementation", "cp"]
        for p in GPU_PLATFORMS:
            cmd += ["--platform", p]
        say(f"[gpu] pip download (Python 3.12 wheels) {' '.join(GPU_WHEELS)} -> {whl}")
        run_logged(cmd + ["-d", str(whl)] + GPU_WHEELS, self.logs / "gpu.log")
        names = sorted(p.name for p in whl.glob("*.whl"))
        missing = [w.split("==")[0] for w in GPU_WHEELS
                   if not any(n.lower().startswith(w.split("==")[0].replace("-", "_") + "-")
                              for n in names)]
        if missing:
            raise Failed(f"check gpu: no wheel in {whl} for {', '.join(missing)}")
        size = sum(p.stat().st_size for p in whl.glob("*.whl")) / 2**20
        return f"{len(names)} wheels ({size:.1f} MiB) and PureJaxRL's files in place"


def note_if_tracked(dest: Path) -> None:
    """Say so when DEST lies in a git work tree that does not ignore it (e.g. .bench/)."""
    if shutil.which("git") is None:
        return
    anc = dest
    while not anc.exists():
        anc = anc.parent
    inside = subprocess.run(["git", "-C", str(anc), "rev-parse", "--is-inside-work-tree"],
                            capture_output=True, text=True)
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        return
    ignored = subprocess.run(["git", "-C", str(anc), "check-ignore", "-q", str(dest)],
                             capture_output=True)
    if ignored.returncode != 0:
        say(f"note: {dest} is inside a git work tree and not ignored; keep it out of git with "
            f"printf '/{dest.name}/\\n' >> \"$(git rev-parse --git-path info/exclude)\"")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="setup_peers.py", description=__doc__.splitlines()[0],
        epilog="Versions and commits: benchmarks/PEERS_SETUP.md.")
    p.add_argument("--dest", required=True, type=Path,
                   help="folder for the venvs and the peers' scripts (created if missing)")
    p.add_argument("--cleanrl-git", type=Path, metavar="CLONE",
                   help=f"clone of github.com/vwxyzjn/cleanrl holding {CLEANRL_COMMIT[:12]}")
    p.add_argument("--purejaxrl-git", type=Path, metavar="CLONE",
                   help=f"clone of github.com/luchris429/purejaxrl holding "
                   f"{PUREJAXRL_COMMIT[:12]}")
    p.add_argument("--only", default=",".join(DEFAULT_PEERS),
                   help=f"comma-separated peers out of {', '.join(PEERS)} "
                   f"(default {','.join(DEFAULT_PEERS)})")
    p.add_argument("--python", default=sys.executable,
                   help="the Python that makes the venvs (default: this one; the pins were "
                   "resolved with Python 3.11)")
    p.add_argument("--torch-index", metavar="URL",
                   help="index for torch alone (e.g. the CPU wheels' index of PyTorch)")
    p.add_argument("--no-check", action="store_true", help="build only, no smoke runs")
    a = p.parse_args(argv)
    only = [s.strip() for s in a.only.split(",") if s.strip()]
    bad = [s for s in only if s not in PEERS]
    if bad or not only:
        p.error(f"--only: unknown peer {', '.join(bad) or '(none given)'}; "
                f"choose from {', '.join(PEERS)}")
    a.only = [s for s in PEERS if s in only]
    for peer, opt, commit in (("cleanrl", "cleanrl_git", CLEANRL_COMMIT),
                              ("cleanrl-atari", "cleanrl_git", CLEANRL_COMMIT),
                              ("purejaxrl", "purejaxrl_git", PUREJAXRL_COMMIT),
                              ("gpu", "purejaxrl_git", PUREJAXRL_COMMIT)):
        if peer not in a.only:
            continue
        clone = getattr(a, opt)
        flag = "--" + opt.replace("_", "-")
        if clone is None:
            p.error(f"{peer} needs {flag} CLONE (or leave it out of --only)")
        if shutil.which("git") is None:
            p.error(f"{peer} needs git on PATH (to read its scripts out of {flag})")
        ok = subprocess.run(["git", "-C", str(clone), "cat-file", "-e", f"{commit}^{{commit}}"],
                            capture_output=True)
        if ok.returncode != 0:
            p.error(f"{flag} {clone}: not a git clone holding commit {commit} "
                    f"(git -C {clone} fetch origin {commit})")
    if shutil.which(a.python) is None and not Path(a.python).is_file():
        p.error(f"--python {a.python}: not found")
    if a.dest.exists() and not a.dest.is_dir():
        p.error(f"--dest {a.dest}: exists and is not a folder")
    a.dest = a.dest.resolve()
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    a.dest.mkdir(parents=True, exist_ok=True)
    b = Builder(a)
    say(f"setup_peers: {', '.join(a.only)} into {a.dest}")
    note_if_tracked(a.dest)
    if a.no_check:
        b.check = lambda name, what, *args, **kw: f"{what}: not run (--no-check)"  # type: ignore
    results: dict[str, str] = {}
    failed = False
    for peer in a.only:
        try:
            results[peer] = "ok: " + getattr(b, peer.replace("-", "_"))()
            say(f"[{peer}] {results[peer]}")
        except Failed as e:
            failed = True
            results[peer] = f"FAILED: {e}"
            say(f"[{peer}] {e}")
    (a.dest / "versions").mkdir(parents=True, exist_ok=True)
    (a.dest / "versions" / "setup.json").write_text(json.dumps(
        {"cleanrl_commit": CLEANRL_COMMIT, "purejaxrl_commit": PUREJAXRL_COMMIT,
         "python": a.python, "results": results}, indent=1) + "\n")
    for peer in a.only:
        say(f"check {peer}: {results[peer].splitlines()[0]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
