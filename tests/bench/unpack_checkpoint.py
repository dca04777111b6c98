"""Rebuilds a float32 checkpoint folder (DST/model.safetensors plus the copied config,
tokenizer and other files) from the transport copy written by pack_checkpoint.py:
int8 rows times their float32 scale, float16 tensors widened to float32.

Needs only python3, torch, safetensors.  Usage: unpack_checkpoint.py SRC DST
"""
import os
import shutil
import sys

from safetensors.torch import load_file, save_file


def main(src, dst):
    os.makedirs(dst, exist_ok=True)
    for f in sorted(os.listdir(src)):
        p = os.path.join(src, f)
        if os.path.isfile(p) and f != "packed.safetensors" and not f.endswith((".safetensors", ".bin")):
            shutil.copy(p, os.path.join(dst, f))
    packed = load_file(os.path.join(src, "packed.safetensors"))
    sd = {}
    for k, v in packed.items():
        if k.endswith(".q8"):
            base = k[: -len(".q8")]
            sd[base] = (v.float() * packed[base + ".scale"].float()).contiguous()
        elif k.endswith(".scale") and k[: -len(".scale")] + ".q8" in packed:
            continue
        else:
            sd[k] = (v.float() if v.is_floating_point() else v).contiguous()
    save_file(sd, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    os.chmod(os.path.join(dst, "model.safetensors"), 0o644)
    print(f"unpacked {len(sd)} tensors to {dst}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
