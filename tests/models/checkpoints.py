"""Small real checkpoints for tests: the packaged MiniLM, and MiniLM with fresh heads.

A fresh (seeded) head scores nothing meaningful, but it makes a genuine Hugging Face
sequence- or token-classification checkpoint on disk, loaded by path exactly as a
fine-tuned one would be. tests/models/conftest.py turns them into fixtures.
"""

from __future__ import annotations

from pathlib import Path

from transforms.models import loading, torch_models


def _save(model, out: Path) -> str:
    model.save_pretrained(out)
    loading.load_tokenizer(loading.ModelSpec(loading.packaged_model_path())).save_pretrained(out)
    return str(out)


def save_cross_encoder(out: Path, num_labels: int = 1, token_types: int = 2) -> str:
    """MiniLM + a seeded `num_labels` sequence-classification head, saved at `out`."""
    import torch
    from transformers import AutoModelForSequenceClassification
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(
        loading.packaged_model_path(), num_labels=num_labels)
    torch_models.ensure_token_types(model, token_types)
    return _save(model, out)


def save_keyphrase(out: Path) -> str:
    """MiniLM + a seeded two-class token head, labels K (0) and O (1) as in KPQA."""
    import torch
    from transformers import AutoModelForTokenClassification
    torch.manual_seed(0)
    model = AutoModelForTokenClassification.from_pretrained(
        loading.packaged_model_path(), num_labels=2, id2label={0: "K", 1: "O"},
        label2id={"K": 0, "O": 1})
    return _save(model, out)


class Payload:
    """An object whose unpickling runs code: it writes `marker`. Stands for what a
    malicious checkpoint or state file would hold."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('ran')",)


def write_malicious_pickle(path: Path, marker: Path) -> Path:
    """`torch.save` of a `Payload` at `path` (the zip format of .pt and .bin files)."""
    import torch
    torch.save({"state": Payload(marker)}, path)
    return path


def copy_checkpoint(src: str, out: Path) -> Path:
    """A writable copy of a checkpoint folder (to plant or break files in)."""
    import shutil
    shutil.copytree(src, out)
    return out
