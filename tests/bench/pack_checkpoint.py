"""Packs a trained checkpoint folder (e.g. a judge from pipelines.train_cross_encoder) into a
small transport copy: every floating tensor as float16, except the word embeddings
(keys ending in `word_embeddings.weight`), stored as int8 with a per-row float32 scale
(`<key>.q8`, `<key>.scale`; scale = row abs-max / 127). The folder's other top-level files
(config.json with its metadata such as the decision threshold, tokenizer files, ...) are
copied as they are; weight files (*.safetensors, *.bin) and subfolders (e.g. `last/`) are not.
unpack_checkpoint.py rebuilds a float32 folder from it.

Needs only python3, torch, safetensors.  Usage: pack_checkpoint.py SRC DST
"""
import os
import shutil
import sys

import torch
from safetensors.torch import load_file, save_file

WEIGHT_SUFFIXES = (".safetensors", ".bin")
EMBED_SUFFIX = "word_embeddings.weight"


def load_weights(src):
    names = sorted(f for f in os.listdir(src) if os.path.isfile(os.path.join(src, f)))
    st = [f for f in names if f.endswith(".safetensors")]
    sd = {}
    if st:
        for f in st:
            sd.update(load_file(os.path.join(src, f)))
        return sd
    for f in (f for f in names if f.endswith(".bin")):
        sd.update(torch.load(os.path.join(src, f), map_location="cpu", weights_only=True))
    if not sd:
        sys.exit(f"pack_checkpoint: no *.safetensors or *.bin weights in {src}")
    return sd


def main(src, dst):
    os.makedirs(dst, exist_ok=True)
    copied = []
    for f in sorted(os.listdir(src)):
        p = os.path.join(src, f)
        if os.path.isfile(p) and not f.endswith(WEIGHT_SUFFIXES):
            shutil.copy(p, os.path.join(dst, f))
            copied.append(f)
    out = {}
    for k, v in load_weights(src).items():
        if k.endswith(EMBED_SUFFIX) and v.is_floating_point() and v.dim() == 2:
            v = v.float()
            scale = v.abs().amax(dim=1, keepdim=True) / 127.0
            safe = torch.where(scale > 0, scale, torch.ones_like(scale))  # all-zero rows stay 0
            out[k + ".q8"] = torch.round(v / safe).clamp(-127, 127).to(torch.int8).contiguous()
            out[k + ".scale"] = scale.contiguous()
        elif v.is_floating_point():
            out[k] = v.half().contiguous()
        else:
            out[k] = v.contiguous()
    save_file(out, os.path.join(dst, "packed.safetensors"), metadata={"format": "pt"})
    os.chmod(os.path.join(dst, "packed.safetensors"), 0o644)
    print(f"packed {len(out)} tensors to {dst}; copied {', '.join(copied)}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
