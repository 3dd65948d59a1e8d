"""Admin initialisation (Liu et al. 2020, "Understanding the Difficulty of Training
Transformers") for any post-LN fairseq Transformer of the plugin.

Every residual sublayer ``i`` of a post-LN layer computes
``x_i = LN(x_(i-1) * omega_i + f_i(x_(i-1)))`` with ``omega_i`` a learned ``d``-vector.
:func:`apply_admin` patches the ``residual_connection(x, residual)`` hook that fairseq's
:class:`~fairseq.modules.TransformerEncoderLayerBase` / ``TransformerDecoderLayerBase`` call
after each sublayer (``x`` = the sublayer output after dropout, ``residual`` = its input), per
layer instance, with an :class:`AdminResidual` child that holds the omegas (so they are saved,
loaded, optimized and counted like any parameter).

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
import tempfile

import torch
from torch import nn

logger = logging.getLogger(__name__)

__all__ = [
    "ADMIN_MODES",
    "AdminResidual",
    "add_admin_args",
    "admin_layers",
    "apply_admin",
    "closed_form_omega",
    "read_profile",
    "write_profile",
]

ADMIN_MODES = ("none", "profile", "closed-form")


def add_admin_args(parser) -> None:
    """``--admin-init`` and ``--admin-profile-file`` (no defaults: architectures set them)."""
    g = parser.add_argument_group("Admin initialisation (lightcompress)")
    g.add_argument(
        "--admin-init",
        choices=ADMIN_MODES,
        help="residual scaling x * omega + f(x) of post-LN layers: profile (Liu et al. 2020, "
        "one training batch), closed-form (admin-torch, sqrt((N+1)/ln(N+1) - 1)) or none",
    )
    g.add_argument(
        "--admin-profile-file",
        metavar="PATH",
        help="with --admin-init profile: read the omegas from PATH if it exists, otherwise "
        "profile on the first training batch and write them to PATH (JSON)",
    )


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
        out.append((side, [(f"{side}.layers.{i}", layer) for i, layer in enumerate(layers)]))
    return out


def _unwrap(layer):
    # checkpoint_wrapper / FSDP keep the original module reachable
    for attr in ("_checkpoint_wrapped_module", "module"):
        inner = getattr(layer, attr, None)
        if isinstance(inner, nn.Module) and hasattr(inner, "residual_connection"):
            return inner
    return layer


def _sublayers(layer) -> list[str]:
    if getattr(layer, "encoder_attn", None) is not None:
        return ["self_attn", "encoder_attn", "ffn"]
    return ["self_attn", "ffn"]


def _pre_hook(module, args, kwargs):
    admin = module.admin
    names = admin.sublayers
    if "encoder_attn" in names:
        enc = kwargs.get("encoder_out", args[1] if len(args) > 1 else None)
        if enc is None:  # fairseq skips the cross-attention sublayer
            names = [n for n in names if n != "encoder_attn"]
    admin.start(names)


def read_profile(path: str) -> dict[str, float]:
    """Read an Admin profile file (JSON ``{"encoder.layers.0.self_attn": omega, ...}``)."""
    with open(path) as f:
        data = json.load(f)
    if not isinstance(data, dict) or not all(isinstance(v, (int, float)) for v in data.values()):
        raise ValueError(f"{path} is not an Admin profile (a JSON object of numbers)")
    return {k: float(v) for k, v in data.items()}


def write_profile(path: str, values: dict[str, float]) -> None:
    """Write the profile atomically (temp file + rename)."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".admin-", suffix=".json", dir=d)
    with os.fdopen(fd, "w") as f:
        json.dump(values, f, indent=1)
    os.replace(tmp, path)


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


def apply_admin(model: nn.Module, args, mode: str | None = None, profile_file: str | None = None):
    """Give every layer of ``model.encoder`` / ``model.decoder`` Admin residuals.

    Parameters
    ----------
    model : nn.Module
        A fairseq encoder-decoder model whose stacks hold ``TransformerEncoderLayerBase`` /
        ``TransformerDecoderLayerBase`` layers (post-LN).
    args : namespace
        Read for ``admin_init`` / ``admin_profile_file`` unless given explicitly.
    mode : {"none", "profile", "closed-form"}, optional
    profile_file : str, optional

    Returns
    -------
    dict
        ``layer.sublayer -> omega`` initial values (empty for ``none`` or a pending profile).

    Raises
    ------
    ValueError
        Unknown mode, a pre-LN layer, or a layer without ``residual_connection``.
    """
    mode = mode or getattr(args, "admin_init", None) or "none"
    if mode not in ADMIN_MODES:
        raise ValueError(f"--admin-init {mode!r}: choose from {ADMIN_MODES}")
    if mode == "none":
        return {}
    path = profile_file or getattr(args, "admin_profile_file", None)
    loaded = None
    if mode == "profile" and path and os.path.exists(path):
        loaded = read_profile(path)
    values: dict[str, float] = {}
    for side, layers in admin_layers(model):
        state = _ProfileState()
        n_res = sum(len(_sublayers(_unwrap(layer))) for _, layer in layers)
        for name, wrapped in layers:
            layer = _unwrap(wrapped)
            if not hasattr(layer, "residual_connection"):
                raise ValueError(f"{name} has no residual_connection hook; cannot apply Admin")
            if getattr(layer, "normalize_before", False):
                raise ValueError(
                    f"Admin is for post-LN layers, but {name} is pre-LN "
                    "(--encoder/decoder-normalize-before); use --admin-init none"
                )
            if getattr(layer, "admin", None) is not None:
                raise ValueError(f"{name} already has Admin residuals")
            subs = _sublayers(layer)
            init = closed_form_omega(n_res) if mode == "closed-form" else 1.0
            admin = AdminResidual(layer.embed_dim, subs, init, profile=(mode == "profile"))
            admin.prefix = name
            layer.admin = admin
            # an instance attribute shadows the class's method (a bound method, not a second
            # registration of the module)
            object.__setattr__(layer, "residual_connection", admin.forward)
            layer.register_forward_pre_hook(_pre_hook, with_kwargs=True)
            if mode == "closed-form":
                values.update({f"{name}.{s}": init for s in subs})
            elif loaded is not None:
                mine = {s: loaded[f"{name}.{s}"] for s in subs if f"{name}.{s}" in loaded}
                if len(mine) != len(subs):
                    raise ValueError(
                        f"Admin profile {path} has no value for some sublayer of {name} "
                        f"(needs {', '.join(f'{name}.{s}' for s in subs)}); delete it to re-profile"
                    )
                admin.set_values(mine)
                values.update({f"{name}.{s}": v for s, v in mine.items()})
            else:
                admin._state = state
    if mode == "profile" and loaded is None:
        model.register_forward_hook(functools.partial(_finish_hook, path=path))
    return values
