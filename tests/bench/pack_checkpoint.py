"""A checkpoint packed small enough to copy to a GPU machine with the checkout, and back.

    python -m tests.bench.pack_checkpoint pack SRC_DIR DST_DIR [embeddings]
    python -m tests.bench.pack_checkpoint unpack DST_DIR OUT_DIR

Every floating-point matrix (embeddings, attention and feed-forward weights, the head)
becomes int8 with one float32 scale per row; vectors (biases, LayerNorm) stay float16.
A MiniLM judge goes from 90 MB to 23 MB. With `embeddings`, only the word embeddings
become int8 and the other matrices float16 (34 MB; the H200 decisions check's packing). The quantised weights are not the original ones:
a comparison made with them (bench_gpu's `decisions`: the GPU's bfloat16 decisions
against the CPU's float32 ones) unpacks the same folder on both machines.
"""

from __future__ import annotations

import os
import shutil
import sys

import torch
from safetensors.torch import load_file, save_file

PACKED = "packed.safetensors"


def pack(src: str, dst: str, only: str = "") -> None:
    if only not in ("", "embeddings"):
        raise ValueError(f"pack takes `embeddings` or nothing after its folders, got {only!r}")
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        path = os.path.join(src, name)
        if os.path.isfile(path) and not name.endswith((".safetensors", ".bin")):
            shutil.copy(path, dst)
    out = {}
    for key, value in load_file(os.path.join(src, "model.safetensors")).items():
        quantised = not only or key.endswith("word_embeddings.weight")
        if value.is_floating_point() and value.dim() == 2 and quantised:
            scale = value.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127.0
            out[key + ".q8"] = torch.round(value / scale).clamp(-127, 127).to(torch.int8)
            out[key + ".scale"] = scale.float().contiguous()
        else:
            out[key] = (value.half() if value.is_floating_point() else value).contiguous()
    save_file(out, os.path.join(dst, PACKED))


def unpack(src: str, dst: str) -> None:
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        if name != PACKED and os.path.isfile(os.path.join(src, name)):
            shutil.copy(os.path.join(src, name), dst)
    packed = load_file(os.path.join(src, PACKED))
    weights = {}
    for key, value in packed.items():
        if key.endswith(".q8"):
            base = key[: -len(".q8")]
            weights[base] = (value.float() * packed[base + ".scale"]).contiguous()
        elif not key.endswith(".scale"):
            weights[key] = (value.float() if value.is_floating_point() else value).contiguous()
    save_file(weights, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})


if __name__ == "__main__":
    command, source, target, *only = sys.argv[1:5]
    {"pack": pack, "unpack": unpack}[command](source, target, *only)
