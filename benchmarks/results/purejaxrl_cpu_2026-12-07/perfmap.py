"""Write perf's map perf-PID.map (in the folder where perf reads it: `PERF_MAP_DIR`) of every
compiled Numba function in this process whose object code Numba still holds: those compiled in
this process, not loaded from the disk cache (so run with an empty NUMBA_CACHE_DIR). Each
library's symbols come from `nm` on its object code, placed by its entry point's address."""

import gc
import os
import subprocess
import tempfile

PERF_MAP_DIR = os.path.join(os.sep, "tmp")
"""perf reads the symbols of code made at run time from this fixed folder on every Linux
machine (not TMPDIR)."""


def write() -> int:
    from numba.core.dispatcher import Dispatcher

    lines = []
    seen = set()
    for obj in gc.get_objects():
        if not isinstance(obj, Dispatcher):
            continue
        for cres in list(obj.overloads.values()):
            lib = cres.library
            if id(lib) in seen:
                continue
            seen.add(id(lib))
            try:
                blob = lib._get_compiled_object()
            except Exception:  # loaded from the disk cache: no object code kept
                continue
            with tempfile.NamedTemporaryFile(suffix=".o", delete=False) as f:
                f.write(blob)
            out = subprocess.run(["nm", "-S", "--defined-only", f.name], capture_output=True,
                                 text=True).stdout
            os.unlink(f.name)
            syms = {}
            for ln in out.splitlines():
                parts = ln.split()
                if len(parts) == 4 and parts[2] in "tT":
                    syms[parts[3]] = (int(parts[0], 16), int(parts[1], 16))
            base = None
            for name, (off, _) in syms.items():
                try:
                    addr = lib.get_pointer_to_function(name)
                except Exception:
                    addr = 0
                if addr:
                    base = addr - off
                    break
            if base is None:
                continue
            for name, (off, size) in syms.items():
                lines.append(f"{base + off:x} {size:x} {name[:200]}")
    with open(os.path.join(PERF_MAP_DIR, f"perf-{os.getpid()}.map"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return len(lines)
