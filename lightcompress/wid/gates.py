"""Hard-concrete (L0) gates and the Lagrangian sparsity objective (DA-WID Sec. 3.3, Eq. 13).

The gates follow Louizos et al. (2018) as CoFi pruning uses them (Xia et al., 2022; its
``models/l0_module.py``): a gate of ``n`` entries holds ``log_alpha`` (n,); during training a
sample is ``z = clamp(sigmoid((log u - log(1 - u) + log_alpha) / T) * (r - l) + l, 0, 1)`` with
``u ~ U(eps, 1 - eps)``, stretch limits ``(l, r) = (-0.1, 1.1)`` and temperature ``T = 2/3``;
the probability that an entry is non-zero (its expected L0 norm) is ``1 - cdf(0)``. At
evaluation the gate is deterministic as in CoFi: the ``round(n - sum(1 - cdf(0)))`` entries with
the smallest ``sigmoid(log_alpha / T * 0.8)`` are 0, the others keep that soft value (which
fusion multiplies into the weights).

Plain PyTorch, no fairseq import.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["LIMIT_L", "LIMIT_R", "TEMPERATURE", "HardConcreteGate", "LagrangianSparsity"]

LIMIT_L, LIMIT_R = -0.1, 1.1
TEMPERATURE = 2.0 / 3.0
_EPS = 1e-6
_MAGICAL = 0.8  # CoFi's factor for the deterministic soft mask (from Wang et al., 2020)
_LOG_ALPHA_RANGE = (math.log(1e-2), math.log(1e2))  # CoFi's constrain_parameters


class HardConcreteGate(nn.Module):
    """``n`` hard-concrete gates of one level (``"dim"``, ``"head"`` or ``"layer"``).

    Parameters
    ----------
    n : int
        Number of gated entries.
    level : str
        Which mask level the gate belongs to (switched on and off per level).
    init_mean : float
        Mean of the initial ``log_alpha`` (std 0.01). CoFi: 10 (almost surely open) for hidden,
        head and layer gates, ``log(1 - 0.5) - log(0.5) = 0`` for FFN intermediate dimensions.
    lr_scale : float
        ``log_alpha`` trains at this multiple of the optimizer's learning rate.
    """

    def __init__(self, n: int, level: str, init_mean: float = 10.0, lr_scale: float = 1.0):
        super().__init__()
        if n < 1:
            raise ValueError(f"a gate needs at least one entry, got {n}")
        if not lr_scale > 0:
            raise ValueError(f"the gates' learning-rate scale must be > 0, got {lr_scale}")
        self.level = level
        # log_alpha = scale * log_alpha_scaled: with Adam (whose steps do not depend on the
        # gradient's scale) this trains log_alpha at `scale` times the model's learning rate, as
        # CoFi trains its L0 module with its own, larger learning rate
        self.register_buffer("scale", torch.tensor(float(lr_scale)))
        self.log_alpha_scaled = nn.Parameter(torch.empty(n).normal_(init_mean, 1e-2) / lr_scale)
        self.active = False  # set by the schedule; an inactive gate is all ones

    @property
    def log_alpha(self) -> torch.Tensor:
        """``log_alpha`` (n,), in float32 (also when the model trains in fp16)."""
        return self.log_alpha_scaled.float() * self.scale.float()

    @torch.no_grad()
    def set_log_alpha(self, values) -> None:
        """Set ``log_alpha`` (a tensor of n values, or one number)."""
        self.log_alpha_scaled.copy_(torch.as_tensor(values, dtype=torch.float32) / self.scale)

    @torch.no_grad()
    def rescale(self, lr_scale: float) -> None:
        """Change the learning-rate scale, keeping ``log_alpha``."""
        if not lr_scale > 0:
            raise ValueError(f"the gates' learning-rate scale must be > 0, got {lr_scale}")
        values = self.log_alpha.detach().clone()
        self.scale.fill_(float(lr_scale))
        self.set_log_alpha(values)

    @property
    def n(self) -> int:
        return self.log_alpha_scaled.numel()

    def cdf0(self) -> torch.Tensor:
        """``P(z == 0)`` per entry, (n,)."""
        xn = (0.0 - LIMIT_L) / (LIMIT_R - LIMIT_L)
        logits = math.log(xn) - math.log(1 - xn)
        return torch.sigmoid(logits * TEMPERATURE - self.log_alpha).clamp(_EPS, 1 - _EPS)

    def score(self) -> torch.Tensor:
        """Expected openness ``1 - cdf(0)`` per entry (n,); ones while inactive."""
        if not self.active:
            return torch.ones_like(self.log_alpha_scaled, dtype=torch.float32)
        return 1.0 - self.cdf0()

    def sample(self) -> torch.Tensor:
        u = torch.empty_like(self.log_alpha_scaled, dtype=torch.float32).uniform_(_EPS, 1 - _EPS)
        s = torch.sigmoid((torch.log(u) - torch.log(1 - u) + self.log_alpha) / TEMPERATURE)
        return (s * (LIMIT_R - LIMIT_L) + LIMIT_L).clamp(0.0, 1.0)

    def deterministic(self) -> torch.Tensor:
        """CoFi's evaluation mask (n,): the expected number of zeros set to 0, the rest soft."""
        with torch.no_grad():
            expected_zeros = self.n - float((1.0 - self.cdf0()).sum())
            num_zeros = min(self.n, max(0, round(expected_zeros)))
        soft = torch.sigmoid(self.log_alpha / TEMPERATURE * _MAGICAL)
        if num_zeros > 0:
            idx = torch.topk(soft.detach(), k=num_zeros, largest=False).indices
            soft = soft.index_fill(0, idx, 0.0)
        return soft

    def forward(self, dtype: torch.dtype | None = None) -> torch.Tensor | None:
        """The mask to multiply with, (n,) (in ``dtype``, default float32); ``None`` while
        inactive (nothing to multiply)."""
        if not self.active:
            return None
        z = self.sample() if self.training else self.deterministic()
        return z if dtype is None else z.to(dtype)

    def final(self) -> torch.Tensor:
        """The mask fusion uses: deterministic while active, ones while inactive (n,)."""
        with torch.no_grad():
            if not self.active:
                return torch.ones_like(self.log_alpha_scaled, dtype=torch.float32)
            return self.deterministic().detach().clone()

    @torch.no_grad()
    def constrain(self) -> None:
        low, high = _LOG_ALPHA_RANGE
        scale = float(self.scale)
        self.log_alpha_scaled.clamp_(low / scale, high / scale)

    def extra_repr(self) -> str:
        return f"n={self.n}, level={self.level!r}, active={self.active}"


class LagrangianSparsity(nn.Module):
    """``L_prune = lambda1 (s - t) + lambda2 (s - t)^2`` (Eq. 13) with a linearly warmed target.

    ``lambda1`` and ``lambda2`` are trained by gradient *ascent* (CoFi trains them with a
    negative learning rate): a hook negates their gradients, so one ordinary optimizer minimises
    the loss over the model and maximises it over the multipliers.

    Parameters
    ----------
    target : float
        Final target sparsity ``t`` in [0, 1).
    warmup : int
        Updates over which the target rises linearly from 0 to ``target`` (0: at once).
    lr_scale : float
        The multipliers train at this multiple of the optimizer's learning rate.
    """

    def __init__(self, target: float, warmup: int = 0, lr_scale: float = 1.0):
        super().__init__()
        if not 0.0 <= target < 1.0:
            raise ValueError(f"the target sparsity must be in [0, 1), got {target}")
        if warmup < 0:
            raise ValueError(f"the sparsity warm-up must be >= 0 updates, got {warmup}")
        self.target = float(target)
        self.warmup = int(warmup)
        # lambda = scale * lambda_scaled: trained at `scale` times the model's learning rate
        # (as the gates; CoFi trains both with its L0 learning rate)
        self.register_buffer("scale", torch.tensor(float(lr_scale)))
        self.lambda1_scaled = nn.Parameter(torch.zeros(()))
        self.lambda2_scaled = nn.Parameter(torch.zeros(()))
        for p in (self.lambda1_scaled, self.lambda2_scaled):
            p.register_hook(lambda g: -g)

    @property
    def lambda1(self) -> torch.Tensor:
        return self.lambda1_scaled.float() * self.scale.float()

    @property
    def lambda2(self) -> torch.Tensor:
        return self.lambda2_scaled.float() * self.scale.float()

    def target_at(self, pruned_updates: int) -> float:
        """The target after ``pruned_updates`` updates with the pruning objective on."""
        if pruned_updates < 0:
            return 0.0
        if self.warmup == 0:
            return self.target
        return self.target * min(1.0, pruned_updates / self.warmup)

    def forward(self, expected_sparsity: torch.Tensor, target: float) -> torch.Tensor:
        gap = expected_sparsity - target
        return self.lambda1 * gap + self.lambda2 * gap * gap
