"""Move a fairseq training state between machines within the device tool's size limits.

pack CKPT PREFIX [--no-exp-avg]: the model unchanged (a float32 tensor whose values float16
  holds exactly, e.g. weights inherited from a float16 teacher and frozen, is stored as float16
  and restored: lossless), Adam's moments in bfloat16, everything else as it is; written as
  PREFIX.partN files of at most 15 MiB.
unpack PREFIX OUT: joins the parts, moments back to float32 (a missing exp_avg becomes zeros),
  writes a checkpoint fairseq resumes from.
model CKPT PREFIX: the model and the rest of the state only (no optimizer moments), for a best
  checkpoint that is only scored, never resumed.
"""

import glob
import io
import sys

import torch

PART = 15 * 2**20


def _load(path):
    return torch.load(path, map_location="cpu", weights_only=False)


def _write_parts(state, prefix):
    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getvalue()
    n = 0
    for i in range(0, len(data), PART):
        with open(f"{prefix}.part{n}", "wb") as f:
            f.write(data[i : i + PART])
        n += 1
    print(f"{prefix}: {len(data):,} bytes in {n} parts", flush=True)


HALVED = "_pack_float16_exact"  # the model's keys stored as float16 (restored to float32)


def _halve_exact(st):
    """float32 model tensors that float16 holds exactly, stored as float16 (lossless)."""
    model, halved = st["model"], []
    for k, t in model.items():
        if t.dtype == torch.float32 and torch.equal(t.half().float(), t):
            model[k] = t.half()
            halved.append(k)
    st[HALVED] = halved


def _restore(st):
    for k in st.pop(HALVED, []):
        st["model"][k] = st["model"][k].float()


def pack(ckpt, prefix, exp_avg=True):
    st = _load(ckpt)
    _halve_exact(st)
    for s in st["last_optimizer_state"]["state"].values():
        for k in ("exp_avg", "exp_avg_sq"):
            if k in s:
                s[k] = s[k].to(torch.bfloat16)
        if not exp_avg:
            s.pop("exp_avg", None)
    _write_parts(st, prefix)


def model_only(ckpt, prefix):
    st = _load(ckpt)
    st["last_optimizer_state"] = None
    _halve_exact(st)
    _write_parts(st, prefix)


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def unpack(prefix, out):
    parts = sorted(glob.glob(f"{prefix}.part*"), key=lambda p: int(p.rsplit("part", 1)[1]))
    data = b"".join(_read(p) for p in parts)
    st = torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
    _restore(st)
    opt = st.get("last_optimizer_state")
    if opt is not None:
        for s in opt["state"].values():
            s["exp_avg_sq"] = s["exp_avg_sq"].float()
            s["exp_avg"] = (
                s["exp_avg"].float() if "exp_avg" in s else torch.zeros_like(s["exp_avg_sq"])
            )
    torch.save(st, out)
    print(f"{out}: from {len(parts)} parts", flush=True)


if __name__ == "__main__":
    cmd, *a = sys.argv[1:]
    if cmd == "pack":
        pack(a[0], a[1], exp_avg="--no-exp-avg" not in a)
    elif cmd == "unpack":
        unpack(a[0], a[1])
    elif cmd == "model":
        model_only(a[0], a[1])
    else:
        sys.exit(f"unknown command {cmd}")
