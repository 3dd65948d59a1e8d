"""How much the encoder's output at each layer still differs between positions (std across
positions over the overall std, 0 = every position the same) and between two sources."""

import sys

import torch
from fairseq import checkpoint_utils

import lightcompress.plugin  # noqa: F401  (plugin, safe globals)

path, data, name = sys.argv[1:4]
models, _, task = checkpoint_utils.load_model_ensemble_and_task(
    [path], arg_overrides={"data": data}
)
m = models[0].eval().cpu()
task.load_dataset("test")
ds = task.dataset("test")
out = []
with torch.no_grad():
    pooled = []
    for i in (0, 1):
        x = ds[i]["source"][None]
        h, _ = m.encoder.forward_embedding(x)
        h = h.transpose(0, 1)
        pad = x.eq(m.encoder.padding_idx)
        row = []
        for layer in m.encoder.layers:
            h = layer(h, encoder_padding_mask=pad)
            h = h[0] if isinstance(h, tuple) else h
            v = h[:, 0]
            row.append(round((v.std(0).mean() / (v.std() + 1e-9)).item(), 4))
        pooled.append(h[:, 0].mean(0))
        out.append(row)
cos = torch.cosine_similarity(pooled[0], pooled[1], 0).item()
upd = torch.load(path, map_location="cpu", weights_only=False)["optimizer_history"][-1][
    "num_updates"
]
print(f"spread {name} @{upd}: per layer {out[0]}; pooled cos of two sources {cos:.4f}")
