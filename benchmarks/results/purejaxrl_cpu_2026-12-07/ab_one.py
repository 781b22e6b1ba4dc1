"""Run benchmarks/purejaxrl_cpu.py's trustrl command of a row from the checkout CHECKOUT (its
own trustrl and Numba cache) and print its steady train SPS, as that script reads it.

    python ab_one.py CHECKOUT [ROW]
"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

root = Path(sys.argv[1]).resolve()
row = sys.argv[2] if len(sys.argv) > 2 else "one"
sys.path.insert(0, str(root / "benchmarks"))
import purejaxrl_cpu  # noqa: E402

with tempfile.TemporaryDirectory() as tmp:
    cmd = purejaxrl_cpu.trustrl_command(row, Path(tmp) / "runs")
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(root))
    subprocess.run(cmd, cwd=root, env=env, check=True, stdout=subprocess.DEVNULL)
    (folder,) = (Path(tmp) / "runs").iterdir()
    sps, ret, whole = purejaxrl_cpu.read_run(folder)
print(f"{root.name} {row} steady {sps:,.0f} SPS, whole loop {whole:,.0f} SPS")
