"""A tiny causal transformer: the policy (LM head), the reward model and the critic (scalar head).

Pre-LayerNorm blocks with causal scaled-dot-product attention and learned positions. With the
defaults (d_model 64, 2 layers, 4 heads, MLP 4 x d_model) it has about 0.1M parameters: small
enough to train from scratch on a laptop CPU in seconds, big enough to learn to sort 5 digits.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass
class ModelConfig:
    vocab: int = 12
    """Token ids 0..vocab-1."""
    max_len: int = 12
    """Longest sequence (prompt + answer) the position table covers."""
    d_model: int = 64
    """Width of the residual stream."""
    n_layers: int = 2
    """Transformer blocks."""
    n_heads: int = 4
    """Attention heads (d_model must be a multiple)."""
    out_dim: int = 12
    """vocab for an LM head, 1 for a scalar head (reward model, critic)."""


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    """tokens [B, L] long -> [B, L, out_dim]: next-token logits, or a scalar per position."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg.d_model, cfg.n_heads) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.out_dim)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, tokens: Tensor) -> Tensor:
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok(tokens) + self.pos(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))

    def with_head(self, out_dim: int) -> TinyLM:
        """A copy of this trunk with a fresh head of out_dim outputs (RM / critic from an LM)."""
        cfg = ModelConfig(**{**asdict(self.cfg), "out_dim": out_dim})
        other = TinyLM(cfg)
        trunk = {k: v for k, v in self.state_dict().items() if not k.startswith("head.")}
        other.load_state_dict(trunk, strict=False)
        return other


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def save_model(model: TinyLM, path: str, extra: dict | None = None) -> None:
    from pathlib import Path

    from trustrl.util.safeio import save_safe

    save_safe({"config": asdict(model.cfg), "state": model.state_dict(), **(extra or {})},
              Path(path))


def load_model(path: str) -> tuple[TinyLM, dict]:
    """(model, the whole saved dict). Raises RunError for a missing or unreadable file."""
    from pathlib import Path

    from trustrl.util.errors import RunError
    from trustrl.util.safeio import load_safe

    if not Path(path).is_file():
        raise RunError(f"no model file at {path}")
    blob = load_safe(path, "model file")  # weights_only: nothing in the file can run
    try:
        model = TinyLM(ModelConfig(**blob["config"]))
        model.load_state_dict(blob["state"])
    except Exception as e:  # noqa: BLE001
        raise RunError(f"cannot read model file {path}: {e}") from None
    return model, blob


# --- sampling and scoring ----------------------------------------------------------------------
@torch.no_grad()
def sample(policy: nn.Module, prompts: Tensor, max_new: int, temperature: float,
           generator: torch.Generator) -> Tensor:
    """Pure temperature sampling: [B, P] prompts -> [B, max_new] answer tokens.

    No top-k or top-p: truncating the distribution would make the sampled tokens come from a
    different policy than the one whose log-probs PPO and the KL estimates use. Tokens after an
    EOS are sampled too (and masked later): the loop stays branch-free and batched.
    """
    seq = prompts
    for _ in range(max_new):
        logits = policy(seq)[:, -1, :] / temperature
        probs = torch.softmax(logits.double(), dim=-1)
        nxt = torch.multinomial(probs, 1, generator=generator)
        seq = torch.cat([seq, nxt], dim=1)
    return seq[:, prompts.shape[1]:]


def answer_logits(policy: nn.Module, prompts: Tensor, responses: Tensor,
                  temperature: float = 1.0) -> Tensor:
    """[B, T, V] logits (divided by the temperature) that produced each answer token."""
    seq = torch.cat([prompts, responses[:, :-1]], dim=1)
    p = prompts.shape[1]
    return policy(seq)[:, p - 1:, :] / temperature


def token_logprobs(logits: Tensor, responses: Tensor) -> tuple[Tensor, Tensor]:
    """(log pi(a_t | s_t), entropy of pi(. | s_t)), both [B, T], from [B, T, V] logits."""
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(2, responses[:, :, None])[:, :, 0]
    entropy = -(logp_all.exp() * logp_all).sum(dim=-1)
    return logp, entropy


def answer_values(critic: nn.Module, prompts: Tensor, responses: Tensor) -> Tensor:
    """[B, T] V(s_t): the critic's scalar at the last token before answer token t."""
    seq = torch.cat([prompts, responses[:, :-1]], dim=1)
    return critic(seq)[:, prompts.shape[1] - 1:, 0]


def sequence_scores(scorer: nn.Module, prompts: Tensor, responses: Tensor,
                    last: Tensor) -> Tensor:
    """[B] scalar head read at the last valid answer token (its EOS, or the last token)."""
    seq = torch.cat([prompts, responses], dim=1)
    out = scorer(seq)[:, :, 0]
    return out.gather(1, (prompts.shape[1] + last)[:, None])[:, 0]


class TinyIO:
    """The trainers' `LMAdapter` for a TinyLM (or any module mapping tokens [B, L] to [B, L, V])
    on fixed-length prompt tensors [B, P]: the functions above and the sort task's EOS."""

    sample = staticmethod(sample)
    answer_logits = staticmethod(answer_logits)
    answer_values = staticmethod(answer_values)

    @staticmethod
    def response_mask(responses: Tensor) -> Tensor:
        from trustrl.rlhf.task import response_mask

        return response_mask(responses)

    @staticmethod
    def is_eos(responses: Tensor) -> Tensor:
        from trustrl.rlhf.task import EOS

        return responses == EOS


TINY_IO = TinyIO()
