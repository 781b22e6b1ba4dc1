"""Files that cannot run code when read, and run-folder writes with one permission rule.

Every `.pt` file trustrl writes (agent.pt, checkpoints/latest.pt, RLHF model files) is a dict of
tensors and plain Python values (dict, list, tuple, str, bytes, numbers, None), saved by
`save_safe` and read by `load_safe` with `torch.load(weights_only=True)`, which refuses any
other object: a `__reduce__` payload planted in such a file is an error, never a call.
NumPy arrays and scalars are stored as {dtype, shape, raw bytes} and come back bit for bit
(the NumPy RNG state of a checkpoint among them).

Each such file carries the SHA-256 digest of its contents, checked on every load (a flipped
or cut byte is a one-line DamagedFileError naming the file), and an HMAC of that digest under
the user's key (below). A file that names code (an import path 'module:Name', an env id
'module:Env-v0': trustrl.util.importing.named_code) is read only when that HMAC is the user's own,
or the user opted in: a file from elsewhere is data, and nothing it names is imported.

The one thing that must stay a pickle is the sync vector env of a checkpoint (Gymnasium envs
mid-episode). It is signed with HMAC-SHA256 under a per-user key kept outside every run folder:
$TRUSTRL_KEY_FILE, else $XDG_CONFIG_HOME/trustrl/checkpoint.key (~/.config/... by default),
created on first use with mode 0600. A checkpoint written by someone else (another user,
another machine) or altered after it was written fails the check and is refused; so is a file
in the old pickle format. The user opts in for the files one command reads with
TRUSTRL_TRUST_FILES=1 (`trustrl train --resume RUN --trust-checkpoint` sets it).

Atomic writes (temp file, fsync, rename) give the file mode 0666 & ~umask, as open() does for
the CSVs and matplotlib for the PNGs: every file of a run folder follows the umask.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import os
import pickle
import secrets
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trustrl.util.errors import RunError

SAFE_FORMAT = 2  # 2: the contents as bytes with their digest and HMAC; 1 (read): no digest
TRUST_ENV = "TRUSTRL_TRUST_FILES"
KEY_ENV = "TRUSTRL_KEY_FILE"
_TAG = "__trustrl__"
_SIGN_DOMAIN = b"trustrl signed pickle v1\0"
_FILE_DOMAIN = b"trustrl signed file v2\0"


class UntrustedFileError(RunError):
    """A file that could only be read by unpickling it, or that names code to import, which
    the user did not allow."""


class DamagedFileError(RunError):
    """A file whose contents do not match the digest written with them."""


# ----- permissions and atomic writes ----------------------------------------------------------
def file_mode() -> int:
    """0666 & ~umask: the mode open() gives a new file."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temp file in the same folder, fsync, then rename over the target."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, file_mode())  # mkstemp makes 0600 whatever the umask
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def remove_stale_tmp(folder: Path) -> list[Path]:
    """Remove the temp files of atomic writes a killed process left in `folder` (not below).
    Call only while holding the folder's lock: a live writer's temp file looks the same."""
    gone = []
    try:
        entries = list(Path(folder).glob(".*.tmp"))
    except OSError:
        return gone
    for p in entries:
        if p.is_file() and not p.is_symlink():
            try:
                p.unlink()
                gone.append(p)
            except OSError:
                pass
    return gone


# ----- tensors and plain values only -----------------------------------------------------------
def encode(obj: Any) -> Any:
    """obj with NumPy arrays/scalars replaced by plain dicts; raises TypeError for anything
    torch.load(weights_only=True) would not read back."""
    if obj is None or type(obj) in (bool, int, float, str, bytes) \
            or isinstance(obj, torch.Tensor):  # exact types: np.float64 is a float subclass
        return obj
    if isinstance(obj, (np.ndarray, np.generic)):
        a = np.asarray(obj)  # tobytes() is C order whatever the strides
        if a.dtype.hasobject or a.dtype.fields is not None:
            raise TypeError(f"cannot store a NumPy array of dtype {a.dtype} safely")
        return {_TAG: "ndarray" if isinstance(obj, np.ndarray) else "npscalar",
                "dtype": a.dtype.str, "shape": list(a.shape), "data": a.tobytes()}
    if isinstance(obj, tuple):
        return tuple(encode(v) for v in obj)
    if isinstance(obj, list):
        return [encode(v) for v in obj]
    if isinstance(obj, dict):
        out: dict[Any, Any] = OrderedDict() if isinstance(obj, OrderedDict) else {}
        for k, v in obj.items():
            if not isinstance(k, (str, int)):
                raise TypeError(f"cannot store a dict key of type {type(k).__name__} safely")
            out[k] = encode(v)
        if hasattr(obj, "_metadata"):  # a module state_dict's version info
            out._metadata = obj._metadata  # type: ignore[attr-defined]
        return out
    raise TypeError(f"cannot store a {type(obj).__name__} safely (tensors and plain values only)")


def decode(obj: Any) -> Any:
    """The inverse of encode."""
    if isinstance(obj, dict):
        kind = obj.get(_TAG)
        if kind in ("ndarray", "npscalar"):
            dtype = np.dtype(obj["dtype"])
            if dtype.hasobject:  # frombuffer would read pointers
                raise ValueError(f"an array of dtype {dtype} is not data")
            a = np.frombuffer(obj["data"], dtype=dtype).reshape(obj["shape"])
            return a.copy() if kind == "ndarray" else a[()]
        out: dict[Any, Any] = OrderedDict() if isinstance(obj, OrderedDict) else {}
        for k, v in obj.items():
            out[k] = decode(v)
        if hasattr(obj, "_metadata"):
            out._metadata = obj._metadata  # type: ignore[attr-defined]
        return out
    if isinstance(obj, list):
        return [decode(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(decode(v) for v in obj)
    return obj


def trusted() -> bool:
    """Whether the user allowed unpickling for the files this command reads."""
    return os.environ.get(TRUST_ENV, "").strip().lower() in ("1", "true", "yes")


def trust_files() -> None:
    """Allow unpickling for this process and the workers it starts (--trust-checkpoint)."""
    os.environ[TRUST_ENV] = "1"


def save_safe(obj: Any, path: str | Path) -> None:
    """Atomically torch.save obj in the safe format (readable with weights_only=True): the
    encoded contents as bytes, their SHA-256 digest, and the digest's HMAC under the user's
    key (None when no key can be made)."""
    inner = io.BytesIO()
    torch.save(encode(obj), inner)
    payload = inner.getvalue()
    digest = hashlib.sha256(payload).hexdigest()
    key = signing_key(create=True)
    buf = io.BytesIO()  # the contents as a uint8 tensor: stored as they are, not re-encoded
    torch.save({"trustrl_safe": SAFE_FORMAT, "sha256": digest,
                "hmac": None if key is None else _file_mac(key, digest),
                "payload": torch.frombuffer(bytearray(payload), dtype=torch.uint8)}, buf)
    atomic_write_bytes(Path(path), buf.getvalue())


def _file_mac(key: bytes, digest: str) -> str:
    return hmac.new(key, _FILE_DOMAIN + digest.encode(), hashlib.sha256).hexdigest()


def _torch_load(p: Path, source: Any, what: str, opt_in: str) -> Any:
    """torch.load(weights_only=True); an old pickle only with the opt-in; RunError otherwise."""
    try:
        return torch.load(source, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        if not trusted():
            raise UntrustedFileError(
                f"{p} is not in trustrl's safe format (a {what} from an older trustrl, or not "
                f"from trustrl): reading it means unpickling, which can run code; if you trust "
                f"it, {opt_in}") from None
        try:
            return torch.load(source, map_location="cpu", weights_only=False)
        except Exception as e:  # noqa: BLE001
            raise RunError(_one_line(f"cannot read {p}: {type(e).__name__}: {e}")) from None
    except Exception as e:  # noqa: BLE001 - a cut or garbled zip, an odd shape or dtype
        raise RunError(_one_line(f"cannot read {p}: {type(e).__name__}: {e}")) from None


def _unwrap(blob: Any, p: Path, what: str, opt_in: str) -> tuple[Any, bool]:
    """(contents, signed by this user) of a loaded file; DamagedFileError on a digest
    mismatch."""
    if not isinstance(blob, dict) or "trustrl_safe" not in blob:
        return blob, False  # read without unpickling: an older file of plain values
    version = blob["trustrl_safe"]
    if version == 1:
        return _decode(blob.get("data"), p), False
    if version != SAFE_FORMAT:
        raise RunError(f"{p}: safe-format version {version!r} not understood by this trustrl")
    payload, digest, mac = blob.get("payload"), blob.get("sha256"), blob.get("hmac")
    if isinstance(payload, torch.Tensor) and payload.dtype == torch.uint8 and payload.dim() == 1:
        payload = payload.numpy().tobytes()
    if not isinstance(payload, bytes) or not isinstance(digest, str):
        raise DamagedFileError(f"{p} is damaged: its contents or their digest are missing")
    if not hmac.compare_digest(hashlib.sha256(payload).hexdigest(), digest):
        raise DamagedFileError(f"{p} is damaged: its contents do not match the digest written "
                               "with them (changed or cut after it was saved)")
    key = signing_key(create=False)
    signed = key is not None and isinstance(mac, str) and hmac.compare_digest(
        _file_mac(key, digest), mac)
    try:  # written by save_safe: nothing in it needs unpickling
        contents = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - objects, odd opcodes, shapes: an edited file
        raise RunError(_one_line(f"cannot read {p}: its contents are not tensors and plain "
                                 f"values ({type(e).__name__}: {e})")) from None
    return _decode(contents, p), signed


def _decode(data: Any, p: Path) -> Any:
    try:
        return decode(data)
    except Exception as e:  # noqa: BLE001 - a dtype or shape that is not one (edited file)
        raise RunError(_one_line(f"cannot read {p}: {type(e).__name__}: {e}")) from None


OPT_IN = f"rerun with --trust-files (in Python: {TRUST_ENV}=1)"
"""How the user opts in, as refusals say it."""


def load_safe(path: str | Path, what: str = "file", opt_in: str = OPT_IN) -> Any:
    """torch.load(weights_only=True), digest checked, decoded. Refused with one line
    (UntrustedFileError) unless TRUSTRL_TRUST_FILES=1: a file that needs unpickling (written
    by an older trustrl, or not by trustrl), and a file that names code (named_code) not
    signed with the user's key. DamagedFileError when the digest does not match; other read
    errors are RunError, one line."""
    from trustrl.util.importing import named_code

    p = Path(path)
    blob, signed = _unwrap(_torch_load(p, p, what, opt_in), p, what, opt_in)
    code = [] if signed or trusted() else named_code(blob)
    if code:
        listed = ", ".join(code)
        raise UntrustedFileError(
            f"{p} names code ({listed[:100]}) and is not signed with your key ({key_path()}): "
            f"a {what} from another user or machine, or edited; importing that code can run "
            f"anything; if you trust it, {opt_in}")
    return blob


def non_finite(values: Any, name: str = "") -> str | None:
    """The name of the first float tensor or array in nested data (dicts, lists) holding NaN
    or inf, or None: weights that would act as garbage, never to be loaded."""
    if isinstance(values, torch.Tensor):
        bad = values.is_floating_point() and not bool(torch.isfinite(values).all())
        return (name or "tensor") if bad else None
    if isinstance(values, np.ndarray):
        bad = values.dtype.kind in "fc" and not bool(np.isfinite(values).all())
        return (name or "array") if bad else None
    items = values.items() if isinstance(values, dict) else enumerate(values) \
        if isinstance(values, (list, tuple)) else ()
    for k, v in items:
        found = non_finite(v, f"{name}.{k}" if name else str(k))
        if found:
            return found
    return None


def _one_line(s: str) -> str:
    return (s.splitlines() or [""])[0]


# ----- signed pickles (a checkpoint's Gymnasium envs) ------------------------------------------
def key_path() -> Path:
    if os.environ.get(KEY_ENV):
        return Path(os.environ[KEY_ENV]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "trustrl" / "checkpoint.key"


def _read_key(p: Path) -> bytes:
    key = bytes.fromhex(p.read_text().strip())
    if len(key) < 16:
        raise ValueError("key too short")
    return key


def signing_key(create: bool) -> bytes | None:
    """The per-user key (created 0600 on first use when `create`), or None if unavailable."""
    p = key_path()
    try:
        return _read_key(p)
    except FileNotFoundError:
        if not create:
            return None
    except (OSError, ValueError):
        return None
    try:  # create: a complete temp file linked into place, so racing creators agree
        p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".checkpoint.key.", suffix=".tmp")
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32) + "\n")
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, p)
            except FileExistsError:
                pass
        finally:
            Path(tmp).unlink(missing_ok=True)
        return _read_key(p)
    except (OSError, ValueError):
        return None


def warn_if_unsigned(what: str = "this run") -> bool:
    """One line on stderr when no key can be made or read: `what` will not be signed, so its
    resume or eval (of pickled envs, of code it names) needs --trust-files. Returns whether
    it warned."""
    if signing_key(create=True) is not None:
        return False
    import sys

    print(f"trustrl: warning: no signing key at {key_path()} (it cannot be created or read): "
          f"{what} is not signed, so resuming it or loading code it names will need "
          f"--trust-files; set {KEY_ENV} to a file you can write to sign it", file=sys.stderr)
    return True


def _mac(key: bytes, data: bytes) -> str:
    return hmac.new(key, _SIGN_DOMAIN + data, hashlib.sha256).hexdigest()


def sign_pickle(data: bytes) -> dict[str, Any]:
    """A pickle with its HMAC under this user's key (no HMAC when no key can be made)."""
    key = signing_key(create=True)
    return {_TAG: "signed-pickle", "data": data, "hmac": None if key is None else _mac(key, data)}


def verify_pickle(blob: Any, path: Path, opt_in: str) -> bytes:
    """The pickle bytes of a signed blob, if its HMAC is right under this user's key (or the
    user opted in). Otherwise a one-line UntrustedFileError naming `opt_in`."""
    if isinstance(blob, dict) and blob.get(_TAG) == "signed-pickle" \
            and isinstance(blob.get("data"), bytes):
        data, mac = blob["data"], blob.get("hmac")
        key = signing_key(create=False)
        if key is not None and isinstance(mac, str) and hmac.compare_digest(_mac(key, data), mac):
            return data
    elif isinstance(blob, bytes):
        data = blob
    else:
        raise RunError(f"{path}: its saved environments are not in a format this trustrl reads")
    if trusted():
        return data
    raise UntrustedFileError(
        f"{path} holds pickled environments not signed with your key ({key_path()}): copied "
        f"from another user or machine, or altered; unpickling them can run code; if you trust "
        f"this file, {opt_in}")
