"""Smartformer's rank search: an A2C agent picks the CP rank of each attention layer in training.

One *search layer* is an encoder layer's self-attention, or a decoder layer's self-attention
together with its cross-attention (the authors' code sums their importance and gives both the
same rank), as far as their Q/K/V projections are :class:`~lightcompress.modules.CPLinear`.
The search (Smartformer, Fig. 2 and Appendix A4; ``XJWang0/Smartformer``, ``exp_smart.py``):

1. Over an *action interval* (updates or epochs) each layer's first-order Taylor importance
   ``sum_params (grad * param)^2`` is accumulated after every update (from the gradient the
   optimizer applies: averaged over ``--update-freq``, unscaled under ``--fp16``).
2. At the end of an interval the metric (validation loss or BLEU) is measured. The first
   time, the least important layer is selected and the metric is the baseline. Afterwards the
   last action is rewarded by Eq. 27 (:func:`reward`) and the agent takes one A2C step on
   ``(s, a, r, s')``.
3. A layer whose last ``settle`` actions agree is settled and the least important layer still
   open is selected; when every layer is settled the search ends and training goes on at fixed
   ranks.
4. The agent picks a rank for the selected layer from its state (:mod:`.agent`); a new rank
   re-fits each projection's CP factors to its current weight and replaces the parameters,
   and the caller rebuilds the optimizer (:func:`~lightcompress.search.optim.replace_parameters`).
   The re-fit is CP-ALS (the algorithm of tensorly's ``parafac``, which the authors call)
   warm-started from the current factors, in torch on the training device
   (:func:`~lightcompress.modules.cp.cp_als`): tensorly's numpy ALS from an SVD start took a
   minute per 512 x 512 projection on a CPU, the warm start a second or two.

Everything the search knows is in :meth:`RankSearch.state_dict` (agent, its optimizer and
generator, the importance accumulators, every layer's rank, the pending transition), so a
resumed training run continues the same search.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
from torch import nn

from lightcompress.errors import ConfigError
from lightcompress.modules.cp import CPLinear
from lightcompress.modules.sharing import count_unique_params
from lightcompress.search.agent import A2CAgent, ArchitectureEncoder, layer_token

__all__ = [
    "Decision",
    "RankSearch",
    "SearchConfig",
    "SearchLayer",
    "cp_rank_bound",
    "find_search_layers",
    "reward",
]


def reward(metric: float, before: float, epsilon: float, higher_is_better: bool) -> float:
    """Eq. 27 of Smartformer with tolerance ``epsilon`` in (0, 1].

    Higher-is-better metrics (BLEU): ``m / m0`` if ``m >= (1 - epsilon) m0`` else ``-m0 / m``.
    The paper prints the condition as ``acc >= acc0 * epsilon``, which with its values
    (epsilon = 0.1 ... 0.25) would accept a 75-90 % drop; the authors' loss-based code reads
    epsilon as the tolerated relative change, which is used for both directions here.
    Lower-is-better metrics (loss), as the authors' code: ``m0 / m`` if ``m < (1 + epsilon) m0``
    else ``-m / m0``. Values are floored at 1e-6 so that a zero BLEU gives a finite reward.
    """
    m, m0 = max(float(metric), 1e-6), max(float(before), 1e-6)
    if higher_is_better:
        return m / m0 if m >= (1.0 - epsilon) * m0 else -m0 / m
    return m0 / m if m < (1.0 + epsilon) * m0 else -m / m0


def cp_rank_bound(layer: CPLinear) -> int:
    """Largest useful CP rank of a projection's ``(out, h, d_k)`` tensor: a rank-R CP tensor
    with R at least the product of its two smallest dimensions can represent any tensor of
    that shape (Kolda & Bader 2009, Sec. 3.1), so larger ranks only add parameters."""
    dims = sorted((layer.out_features, layer.heads, layer.head_dim))
    return dims[0] * dims[1]


@dataclass
class SearchLayer:
    """One searchable attention layer (module docstring)."""

    name: str  # e.g. "encoder.layers.0"
    side: str  # "enc" or "dec"
    projections: list[tuple[str, CPLinear]]

    @property
    def rank(self) -> int:
        return self.projections[0][1].rank

    @property
    def heads(self) -> int:
        return self.projections[0][1].heads

    @property
    def head_dim(self) -> int:
        return self.projections[0][1].head_dim

    @property
    def bound(self) -> int:
        return min(cp_rank_bound(m) for _, m in self.projections)

    attentions: list[nn.Module] = field(default_factory=list)

    def parameters(self):
        """Every parameter of the layer's attention modules (out_proj included), once."""
        seen = set()
        for attn in self.attentions:
            for p in attn.parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    yield p

    def token(self, rank: int | None = None) -> str:
        return layer_token(
            self.side, self.heads, self.head_dim, self.rank if rank is None else rank
        )


def find_search_layers(model: nn.Module) -> list[SearchLayer]:
    """The model's searchable attention layers, encoder first (module docstring)."""
    layers = []
    for side, key, attrs in (
        ("enc", "encoder", ("self_attn",)),
        ("dec", "decoder", ("self_attn", "encoder_attn")),
    ):
        stack = getattr(getattr(model, key, None), "layers", None) or []
        for i, layer in enumerate(stack):
            projections, attentions = [], []
            for attr in attrs:
                attn = getattr(layer, attr, None)
                if attn is None:
                    continue
                found = [
                    (f"{key}.layers.{i}.{attr}.{p}", getattr(attn, p, None))
                    for p in ("q_proj", "k_proj", "v_proj")
                ]
                found = [(n, m) for n, m in found if isinstance(m, CPLinear)]
                if found:
                    projections += found
                    attentions.append(attn)
            if projections:
                layers.append(SearchLayer(f"{key}.layers.{i}", side, projections, attentions))
    seen: dict[int, str] = {}
    for layer in layers:
        for name, m in layer.projections:
            for p in (m.w0, m.w1, m.w2):
                if id(p) in seen:
                    raise ConfigError(
                        f"the rank search cannot change shared CP factors ({seen[id(p)]} and "
                        f"{name} share parameters); train without layer sharing"
                    )
                seen[id(p)] = name
    return layers


@dataclass
class SearchConfig:
    """Settings of the search (the task's ``--sm-search-*`` flags)."""

    ranks: list[int]
    interval: int = 200
    unit: str = "updates"  # or "epochs"
    metric: str = "loss"  # or "bleu"
    epsilon: float = 0.1
    settle: int = 5
    gamma: float = 0.95
    lr: float = 1e-3
    hidden: int = 40
    state_dim: int = 64
    refit_iters: int = 50
    seed: int = 1

    def check(self) -> None:
        """One :class:`ConfigError` for a bad setting."""
        if not self.ranks:
            raise ConfigError("--sm-search-ranks is empty: give the ranks the agent may choose")
        bad = [r for r in self.ranks if isinstance(r, bool) or int(r) != r or r < 1]
        if bad:
            raise ConfigError(f"--sm-search-ranks must be integers >= 1, got {bad}")
        if len(set(self.ranks)) != len(self.ranks):
            raise ConfigError(f"--sm-search-ranks has repeated ranks: {self.ranks}")
        if not (isinstance(self.interval, int) and self.interval >= 1):
            raise ConfigError(f"--sm-search-interval must be an integer >= 1, got {self.interval}")
        if self.unit not in ("updates", "epochs"):
            raise ConfigError(f"--sm-search-unit must be updates or epochs, got {self.unit!r}")
        if self.metric not in ("loss", "bleu"):
            raise ConfigError(f"--sm-search-metric must be loss or bleu, got {self.metric!r}")
        if not (isinstance(self.epsilon, (int, float)) and 0.0 < self.epsilon <= 1.0):
            raise ConfigError(f"--sm-search-epsilon must be in (0, 1], got {self.epsilon}")
        if not (isinstance(self.settle, int) and self.settle >= 1):
            raise ConfigError(f"--sm-search-settle must be an integer >= 1, got {self.settle}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ConfigError(f"--sm-search-gamma must be in [0, 1], got {self.gamma}")
        if self.refit_iters < 1:
            raise ConfigError(f"--sm-search-refit-iters must be >= 1, got {self.refit_iters}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"--sm-search-lr must be a number > 0, got {self.lr}")


@dataclass
class Decision:
    """One step of the search, as logged (one JSON line each)."""

    update: int
    epoch: int
    layer: str
    rank_before: int
    rank: int
    action: int
    reward: float | None  # of the previous action (None for the first one)
    metric_name: str
    metric: float
    params: int
    fit: float | None  # kept energy of the re-fit (None when the rank did not change)
    settled: list[str]
    done: bool
    seconds: float

    def as_dict(self) -> dict:
        return dict(self.__dict__)

    def line(self) -> str:
        if self.done:
            rew = "-" if self.reward is None else f"{self.reward:+.4f}"
            return (
                f"rank search | update {self.update} | search finished: every layer settled | "
                f"reward {rew} | {self.metric_name} {self.metric:.4f} | params {self.params:,}"
            )
        fit = "" if self.fit is None else f" | fit {self.fit:.4f}"
        rew = "-" if self.reward is None else f"{self.reward:+.4f}"
        return (
            f"rank search | update {self.update} | {self.layer} rank {self.rank_before} -> "
            f"{self.rank} | reward {rew} | {self.metric_name} {self.metric:.4f} | params "
            f"{self.params:,}{fit} | settled {len(self.settled)}"
        )


class RankSearch:
    """The search over one model (module docstring).

    Parameters
    ----------
    model : nn.Module
        A model with CP attention projections (e.g. ``smartformer_iwslt_de_en``).
    cfg : SearchConfig
    higher_is_better : bool
        Direction of the metric (BLEU: True, loss: False).
    """

    def __init__(self, model: nn.Module, cfg: SearchConfig, higher_is_better: bool = False):
        cfg.check()
        self.cfg = cfg
        self.higher_is_better = bool(higher_is_better)
        self.layers = find_search_layers(model)
        if not self.layers:
            raise ConfigError(
                "the rank search needs CP attention projections (e.g. --arch "
                "smartformer_iwslt_de_en, or --lc-spec '...[qkv]_proj = cp(rank=R, heads=H)'); "
                "this model has none"
            )
        for layer in self.layers:
            too_big = [r for r in cfg.ranks if r > layer.bound]
            if too_big:
                raise ConfigError(
                    f"--sm-search-ranks {too_big} exceed the CP bound {layer.bound} of "
                    f"{layer.name} (heads {layer.heads}, d_k {layer.head_dim}): a larger rank "
                    "can only add parameters"
                )
        self.ranks = [int(r) for r in cfg.ranks]
        vocab = sorted(
            {layer.token(r) for layer in self.layers for r in self.ranks}
            | {layer.token() for layer in self.layers}
        )
        gen = torch.Generator().manual_seed(cfg.seed)
        self.encoder = ArchitectureEncoder(vocab, cfg.state_dim, cfg.state_dim, generator=gen)
        self.agent = A2CAgent(
            self.encoder.state_dim,
            len(self.ranks),
            hidden=cfg.hidden,
            lr=cfg.lr,
            gamma=cfg.gamma,
            explore=cfg.epsilon,
            seed=cfg.seed,
        )
        self.importance = torch.zeros(len(self.layers), dtype=torch.float64)
        self.steps_accumulated = 0
        self.settled: list[bool] = [False] * len(self.layers)
        self.current: int | None = None  # index of the layer being decided
        self.actions: list[int] = []  # actions taken on the current layer
        self.pending: dict | None = None  # last action: state, action, metric before it
        self.decisions = 0
        self.done = False
        self.last_decision_update = 0
        self._pending_importance: torch.Tensor | None = None
        self._pending_steps: torch.Tensor | None = None
        self._owner_key, self._owner_index = None, None

    # -- importance ---------------------------------------------------------------------------

    @torch.no_grad()
    def accumulate(self, grad_scale: float = 1.0) -> None:
        """Add every open layer's ``sum (grad * param)^2`` of the current gradient.

        The sums stay on the parameters' device (no host synchronisation per update); they are
        read at the next decision. A step whose importance is not finite (an fp16 overflow
        that reached the optimizer) is left out there.
        """
        if self.done:
            return
        grads, params, owner = [], [], []
        for i, layer in enumerate(self.layers):
            for p in layer.parameters():
                if p.grad is not None:
                    grads.append(p.grad)
                    params.append(p)
                    owner.append(i)
        if not grads:
            return
        device = grads[0].device
        if any(g.dtype != torch.float32 for g in grads):  # fp16 / bf16: no overflow in g * p
            grads, params = [g.float() for g in grads], [p.float() for p in params]
        # a few fused kernels per update: (g * p) per tensor, its L2 norm, squares summed per layer
        norms = torch._foreach_norm(torch._foreach_mul(grads, params))
        sq = torch.stack(norms).double().pow(2)
        key = (tuple(owner), str(device))
        if self._owner_key != key:
            self._owner_key, self._owner_index = key, torch.tensor(owner, device=device)
        index = self._owner_index
        step = torch.zeros(len(self.layers), dtype=torch.float64, device=device)
        step.index_add_(0, index, sq)
        step = step * (float(grad_scale) ** 2)
        ok = torch.isfinite(step).all()
        step = torch.where(ok, step, torch.zeros_like(step))
        if self._pending_importance is None or self._pending_importance.device != device:
            self._pending_importance = torch.zeros(
                len(self.layers), dtype=torch.float64, device=device
            )
            self._pending_steps = torch.zeros((), dtype=torch.float64, device=device)
        self._pending_importance += step
        self._pending_steps += ok.double()

    def _collect(self) -> None:
        """Move the importance summed on the device into the accumulators."""
        if self._pending_importance is not None:
            self.importance += self._pending_importance.cpu()
            self.steps_accumulated += int(self._pending_steps.item())
            self._pending_importance = None

    # -- decisions ----------------------------------------------------------------------------

    def tokens(self) -> list[str]:
        return [layer.token() for layer in self.layers]

    def current_ranks(self) -> dict[str, int]:
        return {layer.name: layer.rank for layer in self.layers}

    def _least_important_open(self) -> int:
        self._collect()
        scores = self.importance / max(self.steps_accumulated, 1)
        open_ = [i for i, s in enumerate(self.settled) if not s]
        return min(open_, key=lambda i: (float(scores[i]), i))

    def decide(self, model: nn.Module, metric: float, update: int, epoch: int = 0):
        """Take one decision at the end of an action interval.

        Returns
        -------
        decision : Decision or None
            None when the search is over.
        mapping : dict
            ``id(old parameter) -> new parameter`` of every replaced parameter (for
            :func:`~lightcompress.search.optim.replace_parameters`).
        """
        if self.done:
            return None, {}
        start = time.perf_counter()
        rew = None
        if self.pending is not None:  # reward the last action, learn from it
            rew = reward(metric, self.pending["metric"], self.cfg.epsilon, self.higher_is_better)
            next_state = self.encoder(self.tokens())[self.pending["layer"]]
            self.agent.update(self.pending["state"], self.pending["action"], rew, next_state)
            window = self.actions[-self.cfg.settle :]
            if len(window) == self.cfg.settle and len(set(window)) == 1:
                self.settled[self.current] = True
                self.current = None
        if self.current is None and not all(self.settled):
            self.current = self._least_important_open()
            self.actions = []
        if all(self.settled):
            self.done = True
            self.pending = None
            decision = Decision(
                update,
                epoch,
                "-",
                0,
                0,
                -1,
                rew,
                self.metric_name,
                float(metric),
                count_unique_params(model),
                None,
                [l.name for l in self.layers],
                True,
                time.perf_counter() - start,
            )
            self.decisions += 1
            self._reset_interval(update)
            return decision, {}
        layer = self.layers[self.current]
        state = self.encoder(self.tokens())[self.current]
        action = self.agent.act(state)
        new_rank = self.ranks[action]
        before = layer.rank
        mapping, fit = {}, None
        if new_rank != before or any(m.rank != new_rank for _, m in layer.projections):
            fits = []
            for _, m in layer.projections:
                old = [m.w0, m.w1, m.w2]
                fits.append(
                    m.set_rank(new_rank, n_iter_max=self.cfg.refit_iters, tol=1e-7, warm_start=True)
                )
                for o, n in zip(old, (m.w0, m.w1, m.w2)):
                    mapping[id(o)] = n
            fit = float(sum(fits) / len(fits))
        self.actions.append(action)
        self.pending = {"layer": self.current, "state": state, "action": action, "metric": metric}
        self.decisions += 1
        decision = Decision(
            update,
            epoch,
            layer.name,
            before,
            new_rank,
            action,
            rew,
            self.metric_name,
            float(metric),
            count_unique_params(model),
            fit,
            [l.name for l, s in zip(self.layers, self.settled) if s],
            False,
            time.perf_counter() - start,
        )
        self._reset_interval(update)
        return decision, mapping

    def _reset_interval(self, update: int) -> None:
        self._pending_importance = None
        self.importance.zero_()
        self.steps_accumulated = 0
        self.last_decision_update = int(update)

    @property
    def metric_name(self) -> str:
        return "valid_bleu" if self.cfg.metric == "bleu" else "valid_nll"

    # -- checkpointing ------------------------------------------------------------------------

    def state_dict(self) -> dict:
        self._collect()
        pending = None
        if self.pending is not None:
            pending = dict(self.pending)
            pending["state"] = pending["state"].clone()
        return {
            "version": 1,
            "ranks_space": list(self.ranks),
            "layer_names": [layer.name for layer in self.layers],
            "layer_ranks": [layer.rank for layer in self.layers],
            "encoder": self.encoder.state_dict(),
            "vocabulary": list(self.encoder.vocabulary),
            "agent": self.agent.state_dict(),
            "importance": self.importance.clone(),
            "steps_accumulated": self.steps_accumulated,
            "settled": list(self.settled),
            "current": self.current,
            "actions": list(self.actions),
            "pending": pending,
            "decisions": self.decisions,
            "done": self.done,
            "last_decision_update": self.last_decision_update,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore a search; the model must already hold the saved ranks (its checkpoint)."""
        names = [layer.name for layer in self.layers]
        if state.get("layer_names") != names or state.get("ranks_space") != self.ranks:
            raise ConfigError(
                "the checkpoint's rank search ran over other layers or another action space "
                f"({state.get('layer_names')}, ranks {state.get('ranks_space')}) than this "
                f"run ({names}, ranks {self.ranks}); start a new search with --reset-optimizer "
                "--reset-dataloader --reset-meters from a fresh save dir"
            )
        ranks = [layer.rank for layer in self.layers]
        if state["layer_ranks"] != ranks:
            raise ConfigError(
                f"the model's CP ranks {ranks} differ from the rank search's {state['layer_ranks']}"
                " in the same checkpoint (a damaged or hand-edited checkpoint?)"
            )
        if list(state["vocabulary"]) != self.encoder.vocabulary:
            raise ConfigError("the checkpoint's rank-search vocabulary differs from this run's")
        self.encoder.load_state_dict(state["encoder"])
        self.agent.load_state_dict(state["agent"])
        self.importance = state["importance"].clone().double()
        self._pending_importance = None
        self.steps_accumulated = int(state["steps_accumulated"])
        self.settled = [bool(s) for s in state["settled"]]
        self.current = state["current"]
        self.actions = [int(a) for a in state["actions"]]
        self.pending = state["pending"]
        self.decisions = int(state["decisions"])
        self.done = bool(state["done"])
        self.last_decision_update = int(state["last_decision_update"])
