"""Admin initialisation (Liu et al. 2020, "Understanding the Difficulty of Training
Transformers") for any post-LN fairseq Transformer of the plugin.

Every residual sublayer ``i`` of a post-LN layer computes
``x_i = LN(x_(i-1) * omega_i + f_i(x_(i-1)))`` with ``omega_i`` a learned ``d``-vector.
Admin is a choice made when a layer is built: the plugin's compressed layers
(:mod:`lightcompress.models.compressed`) create an :class:`AdminResidual` child
(:func:`admin_residual`, from ``--admin-init``) that holds the omegas (saved, loaded, optimized
and counted like any parameter), and their ``residual_connection(x, residual)`` - the hook
fairseq's :class:`~fairseq.modules.TransformerEncoderLayerBase` / ``TransformerDecoderLayerBase``
call after each sublayer (``x`` = the sublayer output after dropout, ``residual`` = its
input) - computes ``residual * omega + x`` with it. After the build, :func:`connect_admin`
reads a profile file or prepares the profiling run.

Initialisation of omega (``--admin-init``):

- ``profile`` (the original Admin, ``LiyuanLucasLiu/Transformer-Clinic``): on the first
  training forward pass (one batch), per stack (encoder, decoder) a ratio starts at 1.0; at
  each residual sublayer in execution order ``omega_i <- ratio`` and then
  ``ratio <- sqrt(Var(x_(i-1) * omega_i) + Var(f_i(x_(i-1))))`` (variances over all elements
  of the batch, ``f_i`` after dropout, as in the reference code). The values are written to
  ``--admin-profile-file`` (JSON ``{"encoder.layers.0.self_attn": 1.0, ...}``) when given; if
  that file already exists it is read at build time instead and no profiling happens. A
  checkpoint stores the omegas and a ``profiled`` flag, so a reloaded model never re-profiles.
- ``closed-form`` (``admin-torch``, no profiling): every omega of a stack with ``N`` residual
  sublayers is ``sqrt((N + 1) / ln(N + 1) - 1)`` (the ``O(log N)`` output-change setting);
  ``N = 2 x encoder layers`` for the encoder and ``3 x decoder layers`` for a decoder with
  cross-attention (``2 x`` without).
- ``none``: fairseq's plain ``x + f(x)``, no omega parameters.

Pre-LN layers are refused (Admin is a post-LN method).

Shared layers: LightFormer's groups tie *parameters* between distinct layer objects
(:func:`lightcompress.modules.sharing.tie_layers`), so every position gets its own omegas:
Admin's omega is a per-depth scale, and it costs ``d`` parameters per residual sublayer.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os

import torch
from torch import nn

logger = logging.getLogger(__name__)

__all__ = [
    "ADMIN_MODES",
    "AdminResidual",
    "admin_layers",
    "admin_residual",
    "admin_values",
    "closed_form_omega",
    "connect_admin",
    "read_profile",
    "write_profile",
]

ADMIN_MODES = ("none", "profile", "closed-form")


def closed_form_omega(num_residuals: int) -> float:
    """admin-torch's ``O(log N)`` value ``sqrt((N + 1) / ln(N + 1) - 1)``."""
    n = int(num_residuals)
    if n < 1:
        raise ValueError(f"need at least one residual sublayer, got {n}")
    return math.sqrt((n + 1) / math.log(n + 1) - 1)


class _ProfileState:
    """The running ratio of one stack during profiling (shared by its layers)."""

    def __init__(self):
        self.ratio = 1.0


class AdminResidual(nn.Module):
    """The omegas of one layer and the ``x * omega + f(x)`` it puts in ``residual_connection``.

    Parameters
    ----------
    dim : int
        ``d``.
    sublayers : sequence of str
        Residual sublayer names in execution order (``self_attn``, ``encoder_attn``, ``ffn``).
    init : float
        Initial omega value.

    Attributes
    ----------
    omega : nn.ParameterDict
        ``name -> (d,)`` vector.
    profiled : torch.Tensor
        Persistent flag (buffer); 0 while a ``profile`` run still has to set the omegas.
    """

    def __init__(self, dim: int, sublayers, init: float = 1.0, profile: bool = False):
        super().__init__()
        self.sublayers = list(sublayers)
        self.omega = nn.ParameterDict(
            {n: nn.Parameter(torch.full((dim,), float(init))) for n in self.sublayers}
        )
        self.register_buffer("profiled", torch.tensor(0 if profile else 1, dtype=torch.uint8))
        self.prefix = ""
        self._order: list[str] = self.sublayers
        self._pos = 0
        self._state: _ProfileState | None = None
        self.profile_values: dict[str, float] = {}

    def start(self, sublayers) -> None:
        """Called before each layer forward: the residual sublayers this call will run."""
        self._order, self._pos = list(sublayers), 0

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """``residual * omega + x`` for the next sublayer (``x`` = ``f(residual)``)."""
        name = self._order[self._pos]
        self._pos += 1
        omega = self.omega[name]
        if self.training and self._state is not None and not bool(self.profiled):
            with torch.no_grad():
                omega.fill_(self._state.ratio)
                in_var = (residual.float() * omega.float()).var(unbiased=False)
                out_var = x.float().var(unbiased=False)
                self.profile_values[name] = self._state.ratio
                self._state.ratio = float(torch.sqrt(in_var + out_var))
        return residual * omega + x

    def set_values(self, values: dict[str, float]) -> None:
        with torch.no_grad():
            for name, v in values.items():
                self.omega[name].fill_(float(v))
        self.profiled.fill_(1)

    def extra_repr(self) -> str:
        return f"sublayers={self.sublayers}, profiled={bool(self.profiled)}"


def admin_layers(model: nn.Module):
    """``[(stack name, [(layer name, layer), ...])]`` of a fairseq encoder-decoder model."""
    out = []
    for side in ("encoder", "decoder"):
        stack = getattr(model, side, None)
        layers = getattr(stack, "layers", None)
        if layers is None:
            continue
        out.append(
            (side, [(f"{side}.layers.{i}", _unwrap(layer)) for i, layer in enumerate(layers)])
        )
    return out


def _unwrap(layer):
    # checkpoint_wrapper / FSDP keep the original module reachable
    for attr in ("_checkpoint_wrapped_module", "module"):
        inner = getattr(layer, attr, None)
        if isinstance(inner, nn.Module) and hasattr(inner, "residual_connection"):
            return inner
    return layer


def admin_residual(cfg, side: str, prefix: str, sublayers) -> AdminResidual | None:
    """The Admin residual of one layer at build time (``None`` for ``--admin-init none``).

    Parameters
    ----------
    cfg : TransformerConfig
        Read for ``admin_init``, the stack's depth, width and ``normalize_before``.
    side : {"encoder", "decoder"}
    prefix : str
        The layer's module path (``encoder.layers.3``), the key of its profile values.
    sublayers : sequence of str
        Its residual sublayers in execution order.

    Raises
    ------
    ValueError
        An unknown mode, or a pre-LN layer (Admin is a post-LN method).
    """
    from lightcompress.errors import ConfigError

    mode = getattr(cfg, "admin_init", None) or "none"
    if mode not in ADMIN_MODES:
        raise ConfigError(f"--admin-init {mode!r}: choose from {ADMIN_MODES}")
    if mode == "none":
        return None
    stack = getattr(cfg, side)
    if stack.normalize_before:
        raise ConfigError(
            f"Admin is for post-LN layers, but {prefix} is pre-LN "
            f"(--{side}-normalize-before); use --admin-init none"
        )
    num_residuals = stack.layers * len(sublayers)
    init = closed_form_omega(num_residuals) if mode == "closed-form" else 1.0
    admin = AdminResidual(stack.embed_dim, sublayers, init, profile=(mode == "profile"))
    admin.prefix = prefix
    return admin


def read_profile(path: str) -> dict[str, float]:
    """Read an Admin profile file (JSON ``{"encoder.layers.0.self_attn": omega, ...}``)."""
    from lightcompress.errors import ConfigError

    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"cannot read the Admin profile {path} ({exc}); delete it to re-profile"
        ) from None
    if not isinstance(data, dict) or not all(isinstance(v, (int, float)) for v in data.values()):
        raise ConfigError(f"{path} is not an Admin profile (a JSON object of numbers)")
    return {k: float(v) for k, v in data.items()}


def write_profile(path: str, values: dict[str, float]) -> None:
    """Write the profile atomically, with the user's umask (:func:`lightcompress.io.atomic_write`)."""
    from lightcompress.io import atomic_write

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with atomic_write(path) as f:
        json.dump(values, f, indent=1)


def _finish_profile(model, path):
    admins = [m for m in model.modules() if isinstance(m, AdminResidual)]
    if not admins or all(bool(a.profiled) for a in admins):
        return
    if not any(a.profile_values for a in admins):
        return  # no training forward yet
    values = {}
    for a in admins:
        for name, v in a.profile_values.items():
            values[f"{a.prefix}.{name}"] = v
        a.profiled.fill_(1)
        a._state = None
    logger.info("Admin profiling done: %s", ", ".join(f"{k}={v:.3f}" for k, v in values.items()))
    if path:
        write_profile(path, values)
        logger.info("Admin profile written to %s", path)


def _finish_hook(model, _inputs, _output, path=None):
    _finish_profile(model, path)


def admin_values(model: nn.Module) -> dict[str, float]:
    """``"layer.sublayer" -> omega`` (the first entry of each vector) of every Admin residual."""
    return {
        f"{m.prefix}.{name}": float(omega[0])
        for m in model.modules()
        if isinstance(m, AdminResidual)
        for name, omega in m.omega.items()
    }


def connect_admin(model: nn.Module, args, profile_file: str | None = None) -> dict[str, float]:
    """Finish Admin after the build: read the profile file or prepare profiling.

    Parameters
    ----------
    model : nn.Module
        A model whose layers got their :class:`AdminResidual` at build time.
    args : namespace
        Read for ``admin_init`` / ``admin_profile_file`` unless ``profile_file`` is given.

    Returns
    -------
    dict
        ``layer.sublayer -> omega`` initial values (empty for a pending profile).

    Raises
    ------
    ValueError
        A profile file without a value for some sublayer.
    """
    from lightcompress.errors import ConfigError

    mode = getattr(args, "admin_init", None) or "none"
    stacks = [
        (side, [layer.admin for _, layer in layers if getattr(layer, "admin", None) is not None])
        for side, layers in admin_layers(model)
    ]
    if mode != "profile" or not any(admins for _, admins in stacks):
        return admin_values(model)
    path = profile_file or getattr(args, "admin_profile_file", None)
    if path and os.path.exists(path):
        loaded = read_profile(path)
        for _, admins in stacks:
            for admin in admins:
                keys = [f"{admin.prefix}.{s}" for s in admin.sublayers]
                if not all(k in loaded for k in keys):
                    raise ConfigError(
                        f"Admin profile {path} has no value for some sublayer of {admin.prefix} "
                        f"(needs {', '.join(keys)}); delete it to re-profile"
                    )
                admin.set_values({s: loaded[k] for s, k in zip(admin.sublayers, keys)})
        return admin_values(model)
    if all(bool(a.profiled) for _, admins in stacks for a in admins):
        return admin_values(model)  # a loaded checkpoint: profiled already
    for _, admins in stacks:
        state = _ProfileState()  # one running ratio per stack
        for admin in admins:
            admin._state = state
    model.register_forward_hook(functools.partial(_finish_hook, path=path))
    return {}
