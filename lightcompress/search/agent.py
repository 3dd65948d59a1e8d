"""Smartformer's decision maker: the architecture encoder and the A2C agent.

- :class:`ArchitectureEncoder`: each searchable attention layer is a token
  ``attn-{enc|dec}-{heads}-{d_k}-{rank}``; tokens -> embedding -> sinusoidal positional encoding
  -> one-layer BiLSTM; the state of a layer is the BiLSTM output at its position (Smartformer,
  "State and action", after Cai et al. 2018). As in the authors' code (``cp_trans/encoder.py``),
  the encoder is a fixed random map: it is not trained (only the agent's networks are). Its
  vocabulary holds only the tokens this model can produce (layer kinds x action ranks and the
  initial ranks), not the authors' table of every head/d_k/rank combination (896k rows).
- :class:`A2CAgent`: separate policy and value MLPs (state -> 40 -> ReLU -> |A| and -> 1), Adam
  1e-3, discount 0.95; critic loss ``MSE(r + gamma V(s'), V(s))``, actor loss ``-delta log
  pi(a|s)`` with ``delta = r + gamma V(s') - V(s)`` detached (``cp_trans/actor.py``). Action
  choice follows the authors' code: the greedy action when a standard normal draw exceeds
  ``explore`` (their ``epsilon``), else a sample from the policy.

Everything random draws from the agent's own :class:`torch.Generator`, whose state is part of
:meth:`A2CAgent.state_dict`, so a resumed search makes the same choices.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["A2CAgent", "ArchitectureEncoder", "layer_token"]


def layer_token(side: str, heads: int, head_dim: int, rank: int) -> str:
    """The encoder's token of one attention layer, e.g. ``attn-enc-4-128-64``."""
    return f"attn-{side}-{heads}-{head_dim}-{rank}"


def _sinusoids(length: int, dim: int) -> torch.Tensor:
    """``(length, dim)`` sinusoidal positional encoding (Vaswani et al. 2017)."""
    pos = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    div = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    pe = torch.zeros(length, dim)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div[: dim // 2])
    return pe


class ArchitectureEncoder(nn.Module):
    """Layer tokens -> embedding -> positional encoding -> BiLSTM (module docstring).

    Parameters
    ----------
    vocabulary : list of str
        Every token the model can produce.
    embed_dim : int
        Token embedding size.
    hidden : int
        LSTM hidden size per direction; states have ``2 * hidden`` features.
    generator : torch.Generator, optional
        Source of the (fixed) random weights.
    """

    def __init__(
        self,
        vocabulary: list[str],
        embed_dim: int = 64,
        hidden: int = 64,
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        self.vocabulary = list(vocabulary)
        self.index = {tok: i for i, tok in enumerate(self.vocabulary)}
        self.embedding = nn.Embedding(len(self.vocabulary), embed_dim)
        self.lstm = nn.LSTM(embed_dim, hidden, num_layers=1, batch_first=True, bidirectional=True)
        with torch.no_grad():
            for p in self.parameters():
                bound = 1.0 / math.sqrt(hidden)
                p.copy_(torch.rand(p.shape, generator=generator) * 2 * bound - bound)
            self.embedding.weight.normal_(generator=generator)
        self.requires_grad_(False)

    @property
    def state_dim(self) -> int:
        return 2 * self.lstm.hidden_size

    @torch.no_grad()
    def forward(self, tokens: list[str]) -> torch.Tensor:
        """``(len(tokens), state_dim)``: the state of every layer."""
        unknown = [t for t in tokens if t not in self.index]
        if unknown:
            raise KeyError(f"layer tokens outside the encoder's vocabulary: {unknown}")
        ids = torch.tensor([[self.index[t] for t in tokens]])
        x = self.embedding(ids)  # [1 x L] -> [1 x L x E]
        x = x + _sinusoids(len(tokens), x.shape[-1]).unsqueeze(0)
        out, _ = self.lstm(x)  # [1 x L x E] -> [1 x L x 2H]
        return out[0]


class _MLP(nn.Sequential):
    def __init__(self, n_in: int, hidden: int, n_out: int, generator: torch.Generator | None):
        super().__init__(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, n_out))
        with torch.no_grad():  # the authors' init: N(0, 0.1^2) weights, zero biases
            for layer in (self[0], self[2]):
                layer.weight.normal_(0.0, 0.1, generator=generator)
                layer.bias.zero_()


class A2CAgent:
    """Advantage actor-critic over a discrete action space (module docstring).

    Parameters
    ----------
    state_dim : int
    num_actions : int
    hidden : int
        Width of the policy and value MLPs (the paper's 40).
    lr : float
        Adam learning rate of both networks.
    gamma : float
        Discount.
    explore : float
        The greedy action is taken when a standard normal draw exceeds it, else one is sampled.
    seed : int
        Seed of the agent's generator (initial weights and every draw).
    """

    def __init__(
        self,
        state_dim: int,
        num_actions: int,
        hidden: int = 40,
        lr: float = 1e-3,
        gamma: float = 0.95,
        explore: float = 0.1,
        seed: int = 1,
    ):
        if num_actions < 1:
            raise ValueError("the action space is empty")
        self.num_actions = int(num_actions)
        self.gamma = float(gamma)
        self.explore = float(explore)
        self.generator = torch.Generator().manual_seed(int(seed))
        self.policy = _MLP(state_dim, hidden, num_actions, self.generator)
        self.value = _MLP(state_dim, hidden, 1, self.generator)
        self.optimizer = torch.optim.Adam(
            list(self.policy.parameters()) + list(self.value.parameters()), lr=lr
        )

    def probabilities(self, state: torch.Tensor) -> torch.Tensor:
        """``pi(.|s)``, ``(num_actions,)``."""
        with torch.no_grad():
            return F.softmax(self.policy(state.float()), dim=-1)

    def act(self, state: torch.Tensor) -> int:
        """Choose an action index for ``state`` ``(state_dim,)``."""
        prob = self.probabilities(state)
        if torch.randn(1, generator=self.generator).item() > self.explore:
            return int(prob.argmax().item())
        return int(torch.multinomial(prob, 1, generator=self.generator).item())

    def update(
        self, state: torch.Tensor, action: int, reward: float, next_state: torch.Tensor
    ) -> dict[str, float]:
        """One A2C step on the transition ``(s, a, r, s')``; returns the losses and TD error."""
        s, s_next = state.float(), next_state.float()
        value = self.value(s)
        # The authors' critic target keeps V(s') in the graph (not a semi-gradient); kept.
        target = reward + self.gamma * self.value(s_next)
        critic = F.mse_loss(target, value)
        delta = (target - value).detach()
        log_prob = F.log_softmax(self.policy(s), dim=-1)[int(action)]
        actor = -(delta * log_prob).sum()
        self.optimizer.zero_grad()
        (actor + critic).backward()
        self.optimizer.step()
        return {
            "critic_loss": critic.item(),
            "actor_loss": actor.item(),
            "td_error": delta.item(),
        }

    def state_dict(self) -> dict:
        return {
            "policy": self.policy.state_dict(),
            "value": self.value.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "gamma": self.gamma,
            "explore": self.explore,
        }

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.value.load_state_dict(state["value"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.gamma = float(state["gamma"])
        self.explore = float(state["explore"])
