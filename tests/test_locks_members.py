"""The seeds of a population folder are covered by the population's one lock: no lock file per
seed (a population of thousands would otherwise hold thousands of open files), and a seed
folder cannot be opened for writing by another process while the population is written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trustrl.records.runs import RunDir
from trustrl.util.locks import LOCK_NAME, FolderLockedError

OPEN = "import sys\nfrom trustrl.records.runs import RunDir\nr = RunDir.open(sys.argv[1])"


def _other_process_opens(folder: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-c", OPEN, str(folder)], env=env,
                          capture_output=True, text=True, timeout=120)


def test_seed_folders_share_the_population_lock(tmp_path):
    root = RunDir.create(tmp_path, "CartPole-v1", "ppo", "seeds1-2", {"seeds": [1, 2]})  # type: ignore[arg-type]
    members = [RunDir.create(root.path, "CartPole-v1", "ppo", s, {"seed": s}) for s in (1, 2)]
    assert (root.path / LOCK_NAME).is_file()
    assert not any((m.path / LOCK_NAME).exists() for m in members)
    again = RunDir.open(members[0].path)  # this process holds the population: allowed
    for folder in (root.path, members[1].path):  # another process: refused, naming us
        proc = _other_process_opens(folder)
        assert proc.returncode != 0
        assert f"pid {os.getpid()}" in proc.stderr.strip().splitlines()[-1]
    for r in (*members, again):
        r.set_status("finished", 1)
    assert _other_process_opens(members[1].path).returncode != 0  # the root still holds it
    root.set_status("finished", 1)  # the last holder in this process: released
    proc = _other_process_opens(members[1].path)
    assert proc.returncode == 0, proc.stderr


def test_a_plain_run_folder_is_its_own_lock(tmp_path):
    run = RunDir.create(tmp_path, "CartPole-v1", "ppo", 1, {})
    assert (run.path / LOCK_NAME).is_file()
    proc = _other_process_opens(run.path)
    assert proc.returncode != 0 and "FolderLockedError" in proc.stderr
    run.release()
    assert _other_process_opens(run.path).returncode == 0
    with pytest.raises(FolderLockedError):  # and the other way round
        code = OPEN + "\nprint('locked', flush=True)\nimport time\ntime.sleep(60)"
        p = subprocess.Popen([sys.executable, "-c", code, str(run.path)], stdout=subprocess.PIPE,
                             text=True)
        try:
            assert p.stdout is not None and p.stdout.readline().strip() == "locked"
            RunDir.open(run.path)
        finally:
            p.kill()
            p.wait()
