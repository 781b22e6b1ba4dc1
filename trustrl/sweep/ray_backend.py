"""Ray backend: one Ray task per trial, with the SPEC's CPU/GPU request.

The driver owns the sweep folder. A task runs its trial in a temporary folder on whichever node
Ray picks and returns the trial's files packed; the driver unpacks them into trials/<id>/. A
trial that has a checkpoint in the sweep folder (an interrupted earlier run, local or Ray)
travels to the task packed, so it continues from that checkpoint on any node.

Lost nodes and killed workers are retried by Ray itself (`max_retries`); a trial still lost
after that is recorded as failed and `--resume --retry-failed` reruns it. The nodes need
trustrl installed (the same version as the driver, for identical numbers).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trustrl.sweep.folder import SweepFolder
from trustrl.sweep.local import OnResult
from trustrl.sweep.spec import Trial
from trustrl.sweep.trial import CallbackFactory, pack_folder, unpack_folder
from trustrl.util.errors import TrustrlError
from trustrl.util.lifeline import reap_descendants_when_gone

RAY_RETRIES = 3


def require_ray() -> Any:
    try:
        import ray
    except ModuleNotFoundError:
        raise TrustrlError("the ray backend needs Ray: pip install 'trustrl[ray]'") from None
    return ray


def ray_trial(trial: dict[str, Any], blob: bytes | None,
              make_callback: CallbackFactory | None = None) -> tuple[dict[str, Any], bytes]:
    """The task body: unpack the trial's earlier files (if any), run it, pack the folder."""
    from trustrl.sweep.trial import execute_trial

    tmp = Path(tempfile.mkdtemp(prefix="trustrl-trial-"))
    try:
        trial_dir = tmp / trial["id"]
        if blob is not None:
            unpack_folder(blob, trial_dir)
        res = execute_trial(trial, trial_dir, make_callback)
        return res, pack_folder(trial_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _resumable_blob(folder: SweepFolder, trial: Trial) -> bytes | None:
    d = folder.trial_dir(trial)
    if any(d.glob("*/checkpoints/latest.pt")):
        return pack_folder(d)
    return None


def run_ray(folder: SweepFolder, trials: list[Trial], on_result: OnResult,
            address: str | None = None, workers: int | None = None,
            make_callback: CallbackFactory | None = None,
            on_start: Callable[[Any], None] | None = None) -> None:
    """Submit every trial as a task, record each as it completes (in completion order); the
    trials on_result returns are submitted as they come. on_start(ray): called once Ray is up,
    before the first task (`trustrl tune` starts its study's actor there)."""
    ray = require_ray()
    started_here = False
    if not ray.is_initialized():
        addr = address or os.environ.get("RAY_ADDRESS")
        try:
            if addr:
                ray.init(address=addr, log_to_driver=False)
            else:
                ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
                reap_descendants_when_gone()  # the instance's processes end with this one
        except Exception as e:  # noqa: BLE001 - connection errors become one line
            where = addr or "a local instance"
            raise TrustrlError(f"cannot start Ray ({where}): " +
                               (str(e).splitlines() or [type(e).__name__])[0]) from None
        started_here = True
    res_req = folder.resources
    task = ray.remote(ray_trial).options(
        num_cpus=res_req.get("cpus", 1), num_gpus=res_req.get("gpus", 0),
        max_retries=RAY_RETRIES, retry_exceptions=False)
    refs: dict[Any, Trial] = {}

    def submit(t: Trial) -> None:
        refs[task.remote(t.as_dict(), _resumable_blob(folder, t), make_callback)] = t

    try:
        if on_start is not None:
            on_start(ray)
        for t in trials:
            submit(t)
        while refs:
            done, _ = ray.wait(list(refs), num_returns=1)
            for ref in done:
                t = refs.pop(ref)
                try:
                    res, blob = ray.get(ref)
                except Exception as e:  # noqa: BLE001 - lost node, worker crash, ...
                    msg = (str(e).splitlines() or [type(e).__name__])[0]
                    res = folder.record_failure(t, f"ray: {type(e).__name__}: {msg}")
                else:
                    unpack_folder(blob, folder.trial_dir(t))
                for new in on_result(t, res) or []:
                    submit(new)
    except KeyboardInterrupt:
        for ref in refs:
            ray.cancel(ref, force=True)
        raise
    finally:
        if started_here:
            ray.shutdown()
