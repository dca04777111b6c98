"""bert-score's rescale baselines: files that come with an encoder, read here.

A baseline file is bert-score's CSV `LAYER,P,R,F` (one row per hidden layer: the
expected precision, recall and F of unrelated sentence pairs for that encoder).
"""

from __future__ import annotations

import csv


def read_rescale_baseline(path: str, layer: int) -> tuple[float, float, float]:
    """The (P, R, F) baselines of `layer` in a bert-score rescale file.

    Raises:
        ValueError: the file lacks the columns or the layer.
        OSError: the file cannot be read.
    """
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or not {"LAYER", "P", "R", "F"} <= set(rows[0]):
        raise ValueError(f"{path}: a baseline file has the header LAYER,P,R,F")
    for row in rows:
        if int(row["LAYER"]) == layer:
            return float(row["P"]), float(row["R"]), float(row["F"])
    raise ValueError(f"{path} has no baseline for layer {layer}")
