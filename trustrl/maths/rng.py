"""Counter-based random numbers: the value at (key, counter, index) is a pure function of them.

torch.Generator is a sequential stream: a population of P seeds drawing from one generator gets
numbers that depend on P and on the order of the draws, so seed 7 in a population of 256 would
not be seed 7 run alone. Here every random number is a hash of a 32-bit key (one per stream:
a seed and a purpose, an env, ...), a counter (the step, the epoch) and an index, as in JAX's
threefry keys or Philox. So a member of a population draws exactly the numbers it would draw
alone, on CPU and on CUDA alike, and no state besides the counters needs saving.

The mixer is the "lowbias32" integer hash (Wellons' hash-prospector, public domain). Its 32-bit
multiplications are done in int64 pieces that cannot overflow (torch has no uint32 arithmetic).
Uniforms use the top 24 bits: exactly representable in float32.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

ACTION, ENV, SHUFFLE, EVAL = 1, 2, 3, 4
"""Key purposes: each stream of a member's random numbers has its own."""

_M32 = 0xFFFFFFFF
_GOLDEN = 0x9E3779B9


def _mul32(x: Tensor, c: int) -> Tensor:
    """(x * c) mod 2**32 for int64 x in [0, 2**32), without int64 overflow."""
    lo, hi = c & 0xFFFF, c >> 16
    return (x * lo + (((x * hi) & 0xFFFF) << 16)) & _M32


def mix32(x: Tensor) -> Tensor:
    """A bijective 32-bit integer hash with good avalanche (lowbias32)."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def derive(key: Tensor | int, *tags: Tensor | int) -> Tensor:
    """A new key from a key and integer tags (a purpose, an env index, ...), hashed in turn;
    tensor keys and tags broadcast."""
    k = torch.as_tensor(key, dtype=torch.int64) & _M32
    for tag in tags:
        t = torch.as_tensor(tag, dtype=torch.int64, device=k.device)
        k = mix32((k + _mul32((t + 1) & _M32, _GOLDEN)) & _M32)
    return k


def _mix32_np(x: np.ndarray) -> np.ndarray:
    """mix32 in NumPy's uint32, whose multiplication wraps mod 2**32 by itself."""
    x = x ^ (x >> np.uint32(16))
    x = x * np.uint32(0x7FEB352D)
    x = x ^ (x >> np.uint32(15))
    x = x * np.uint32(0x846CA68B)
    return x ^ (x >> np.uint32(16))


def _bits_np(key: Tensor, counter: Tensor | int, n: int) -> Tensor:
    """`bits` for CPU tensors, in uint32: the same numbers in a tenth of the time (eight
    NumPy operations per hash where the int64 emulation takes twenty torch ones)."""
    c = counter.numpy() if isinstance(counter, Tensor) else np.asarray(counter)
    with np.errstate(over="ignore"):  # a 0-d product is a NumPy scalar, which warns on wrap
        k = _mix32_np(key.numpy().astype(np.uint32) ^ _mix32_np((c & _M32).astype(np.uint32)))
        k = k[..., None]
        j = np.arange(1, n + 1, dtype=np.uint32) * np.uint32(_GOLDEN)
        return torch.from_numpy(_mix32_np(_mix32_np(k + j) ^ k).astype(np.int64))


def _bits_torch(key: Tensor, counter: Tensor | int, n: int) -> Tensor:
    """`bits` in int64 torch arithmetic: any device, CUDA graphs and torch.compile."""
    counter = torch.as_tensor(counter, dtype=torch.int64, device=key.device)
    k = mix32((key ^ mix32(counter & _M32)) & _M32)
    j = torch.arange(n, dtype=torch.int64, device=key.device)
    return mix32(mix32((k.unsqueeze(-1) + _mul32(j + 1, _GOLDEN)) & _M32) ^ k.unsqueeze(-1))


def bits(key: Tensor, counter: Tensor | int, n: int) -> Tensor:
    """32-bit random integers (in int64) of shape key.shape + (n,): entry j hashes (key,
    counter, j). key: int64 tensor of keys; counter: an int, or a tensor broadcastable to key.
    On a CPU the hash runs in NumPy's uint32 (the same numbers, tested)."""
    if (key.device.type == "cpu" and not torch.compiler.is_compiling()
            and (not isinstance(counter, Tensor) or counter.device.type == "cpu")):
        return _bits_np(key, counter, n)
    return _bits_torch(key, counter, n)


def uniform(key: Tensor, counter: Tensor | int, n: int,
            dtype: torch.dtype = torch.float32) -> Tensor:
    """Uniforms in [0, 1) with 24 random bits, shape key.shape + (n,)."""
    return (bits(key, counter, n) >> 8).to(dtype) * (2.0 ** -24)


def normal(key: Tensor, counter: Tensor | int, n: int,
           dtype: torch.dtype = torch.float32) -> Tensor:
    """Standard normals by Box-Muller from 2n uniforms, shape key.shape + (n,)."""
    u = uniform(key, counter, 2 * n, torch.float64)
    u1 = 1.0 - u[..., :n]  # in (0, 1]: the log is finite
    z = torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * torch.pi * u[..., n:])
    return z.to(dtype)


def gumbel(key: Tensor, counter: Tensor | int, n: int,
           dtype: torch.dtype = torch.float32) -> Tensor:
    """Standard Gumbel samples -log(-log U), shape key.shape + (n,); argmax(logits + g) is a
    sample of the categorical distribution softmax(logits)."""
    u = uniform(key, counter, n, torch.float64)
    u = (u + 2.0 ** -25).clamp(max=1.0 - 2.0 ** -25)  # inside (0, 1): both logs finite
    return (-torch.log(-torch.log(u))).to(dtype)


def seed_keys(seeds: list[int], device: str | torch.device = "cpu") -> Tensor:
    """One base key per seed [P]; `derive(base, purpose)` gives a stream's keys."""
    return derive(torch.tensor(list(seeds), dtype=torch.int64, device=device))


def shuffle_keys(seeds: list[int], device: str | torch.device = "cpu") -> Tensor:
    """The keys [P] of the algorithms' minibatch shuffles (trustrl.algos.common)."""
    return derive(seed_keys(seeds, device), SHUFFLE)
