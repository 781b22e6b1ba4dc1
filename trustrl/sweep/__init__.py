"""Sweeps: many algorithms x envs x seeds x settings, locally or on Ray, then one report.

    spec.py     the SPEC file (YAML): parsed and validated into a list of Trials before anything
                runs; every trial's config is resolved and fixed in the sweep folder
    folder.py   the sweep folder: sweep.json (the fixed trials), spec.yaml, trials/<id>/
    trial.py    one trial = one train() (or resume()) in its own folder; result.json last
    local.py    backend: a spawn-context ProcessPoolExecutor sized to the cores
    ray_backend.py  backend: one Ray task per trial with its CPU/GPU request; the trial's files
                travel back to the driver's sweep folder
    runner.py   start / resume: pick the unfinished trials, hand them to a backend, record
    stats.py    pure statistics: bootstrap confidence intervals, IQM, curves on a step grid,
                steps to threshold
    report.py   `trustrl report DIR`: REPORT.md + one PNG of learning curves per env
    cli.py      the `sweep` and `report` subcommands
"""
