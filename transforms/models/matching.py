"""BERTScore's greedy match of a window's text pairs: planned on the host, run on the device.

`plan_match` computes every index of the match with numpy (which table rows each chunk of
pairs gathers, where each real token's maximum lands), so that they can travel to the
device in the window's one copy; `greedy_match` then runs on the device with integer
gathers and one batched matrix product per chunk, nothing the host waits for. Used by
`device.DeviceModel.match` (task `token_match`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from transforms.models import batching

# Greedy matching (token_match) gathers each pair's candidate and reference vectors;
# pairs are matched in chunks of at most this many gathered floats (128 MB as float32).
MATCH_CHUNK_FLOATS = 1 << 25
# Indices travel to the device as int32 (the staging buffer's type).
INT32_MAX = (1 << 31) - 1


class _MatchPlan(NamedTuple):
    """The greedy match of a window, planned on the host (`plan_match`).

    The device's table of unit vectors holds every pass's (rows x longest) hidden states
    end to end, pass k's from row `pass_at[k]`, then the zero row `blank`. Chunk j
    (`chunks[j]` = (pairs, candidate width, reference width, where its candidate maxima
    start, where its reference maxima start)) gathers the table rows `indices[2j]`
    (candidates) and `indices[2j + 1]` (references), padded with `blank`; its maxima go,
    in its (pairs x width) layout, to a buffer of `cand_size` (`ref_size`) floats, and
    `indices[-2]` (`indices[-1]`) picks each real token's maximum out of that buffer, in
    pair order."""

    pass_at: np.ndarray
    blank: int
    chunks: list[tuple[int, int, int, int, int]]
    cand_size: int
    ref_size: int
    indices: list[np.ndarray]


def plan_match(passes: Sequence[batching.Padded], starts: np.ndarray, lengths: np.ndarray,
                pairs: np.ndarray, dim: int) -> _MatchPlan:
    """Every index of the greedy match (see `_MatchPlan`), with numpy: pairs go longest
    first, in chunks of at most `MATCH_CHUNK_FLOATS` gathered floats (one batched matrix
    product per chunk).

    Raises:
        ValueError: more table rows or maxima than int32 indices reach.
    """
    sizes = [padded.attention_mask.size for padded in passes]
    pass_at = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    blank = int(pass_at[-1])
    # the table row of each real token, in the order `starts` counts them
    real = np.concatenate([np.zeros(0, dtype=np.int64)] + [
        at + np.flatnonzero(padded.attention_mask.ravel())
        for at, padded in zip(pass_at, passes)])
    cand_len, ref_len = lengths[pairs[:, 0]], lengths[pairs[:, 1]]
    cand_at = np.concatenate([[0], np.cumsum(cand_len, dtype=np.int64)])
    ref_at = np.concatenate([[0], np.cumsum(ref_len, dtype=np.int64)])
    cand_src = np.zeros(int(cand_at[-1]), dtype=np.int64)
    ref_src = np.zeros(int(ref_at[-1]), dtype=np.int64)
    order = np.lexsort((-ref_len, -cand_len))
    chunks: list[tuple[int, int, int, int, int]] = []
    indices: list[np.ndarray] = []
    cand_size = ref_size = 0
    at = 0
    while at < len(order):
        width = int(cand_len[order[at]]) + int(ref_len[order[at:]].max())
        size = max(1, MATCH_CHUNK_FLOATS // (width * dim))
        chunk = order[at:at + size]
        at += len(chunk)
        cand_rows, cand_valid = _rows(real, starts, pairs[chunk, 0], cand_len[chunk], blank)
        ref_rows, ref_valid = _rows(real, starts, pairs[chunk, 1], ref_len[chunk], blank)
        chunks.append((len(chunk), cand_rows.shape[1], ref_rows.shape[1], cand_size, ref_size))
        indices += [cand_rows.ravel(), ref_rows.ravel()]
        for src, valid, first, offset in ((cand_src, cand_valid, cand_at, cand_size),
                                          (ref_src, ref_valid, ref_at, ref_size)):
            out = first[chunk][:, None] + np.arange(valid.shape[1])[None, :]
            src[out[valid]] = offset + np.flatnonzero(valid.ravel())
        cand_size += cand_rows.size
        ref_size += ref_rows.size
    if max(blank, cand_size, ref_size) >= INT32_MAX:
        raise ValueError(f"a window of {blank} padded tokens and {cand_size} + {ref_size} "
                         f"maxima: more than int32 indices reach; use smaller windows")
    return _MatchPlan(pass_at[:-1], blank, chunks, cand_size, ref_size,
                      [*indices, cand_src, ref_src])


def _rows(real: np.ndarray, starts: np.ndarray, texts: np.ndarray, lengths: np.ndarray,
          blank: int) -> tuple[np.ndarray, np.ndarray]:
    """The table rows of `texts`' tokens, (n, longest), padded with `blank`, and where
    they are real tokens (bool)."""
    columns = np.arange(int(lengths.max()))
    valid = columns[None, :] < lengths[:, None]
    token = np.where(valid, starts[texts][:, None] + columns[None, :], 0)
    return np.where(valid, real[token], blank), valid


def greedy_match(table: Any, plan: _MatchPlan, indices: Sequence[Any]) -> tuple[Any, Any]:
    """Per pair, each candidate token's best cosine with a reference token and each
    reference token's with a candidate token (device tensors in pair order), from the
    unit vectors `table` and the plan's `indices` on the device: integer gathers, one
    batched matrix product per chunk, nothing the host waits for. Padding scores -2, so
    it never wins (where it is padding is read from the indices: the `blank` row)."""
    import torch
    dim, blank = table.shape[1], plan.blank
    cand_best = torch.empty(plan.cand_size, device=table.device)
    ref_best = torch.empty(plan.ref_size, device=table.device)
    for j, (n, cand_width, ref_width, cand_at, ref_at) in enumerate(plan.chunks):
        cand_rows, ref_rows = indices[2 * j], indices[2 * j + 1]
        cand = table.index_select(0, cand_rows).view(n, cand_width, dim)
        ref = table.index_select(0, ref_rows).view(n, ref_width, dim)
        sim = torch.bmm(cand, ref.transpose(1, 2))
        real = ((cand_rows != blank).view(n, cand_width, 1)
                & (ref_rows != blank).view(n, 1, ref_width))
        sim.masked_fill_(~real, -2.0)
        torch.amax(sim, dim=2, out=cand_best[cand_at:cand_at + n * cand_width].view(
            n, cand_width))
        torch.amax(sim, dim=1, out=ref_best[ref_at:ref_at + n * ref_width].view(n, ref_width))
    return cand_best.index_select(0, indices[-2]), ref_best.index_select(0, indices[-1])
