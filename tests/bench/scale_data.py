"""Generated QA rows for the scale benchmark and tests: real words, fixed seed.

Words are the web2 list of the `english-words` package (235,000 real English words, the list
transforms/wes/lexicon_assembly.py builds NLTK's `words` corpus from), drawn
Zipf-distributed (probability of the word of rank r proportional to 1/r). Each question has
references; each of `systems` systems answers it with a copy of the first reference where
each word is replaced with probability 0.3 and the answer cut or extended a little, so every
metric sees partial overlaps. A row: {id, system, prediction, references}. Two shapes
(`SHAPES`): `short` (the default, seed 14), two references of 6-14 words; `long` (seed 15),
one to four references of 2-59 words, answers cut or extended by up to 8 words: long
free-text answers against short and long references, as in NarrativeQA or AVSD.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np

SEED = 14
SYSTEMS = 5
# shape -> (seed, references per question (low, high], words per reference [low, high),
# words an answer is cut or extended by (at most))
SHAPES = {"short": (SEED, (2, 2), (6, 15), 2), "long": (15, (1, 4), (2, 60), 8)}


def vocabulary() -> list[str]:
    """The web2 word list, sorted (its order sets the Zipf ranks)."""
    import english_words

    return sorted(english_words.get_english_words_set(["web2"], lower=True))


def generate_rows(n_rows: int, systems: int = SYSTEMS, seed: int | None = None,
                  shape: str = "short") -> Iterator[dict]:
    """`n_rows` rows (rounded up to whole questions of `systems` rows) of a shape
    (`SHAPES`), deterministic; `seed` replaces the shape's own."""
    shape_seed, (low_refs, high_refs), (low_words, high_words), most_cut = SHAPES[shape]
    words = np.array(vocabulary(), dtype=object)
    rng = np.random.default_rng(shape_seed if seed is None else seed)
    order = rng.permutation(len(words))  # which word gets which rank
    weights = 1.0 / np.arange(1, len(words) + 1)
    cumulative = np.cumsum(weights / weights.sum())
    questions = -(-n_rows // systems)
    chunk = 10_000
    produced = 0
    for start in range(0, questions, chunk):
        count = min(chunk, questions - start)
        lengths = rng.integers(low_words, high_words, size=(count, high_refs))
        n_refs = (np.full(count, high_refs) if low_refs == high_refs  # the short shape's
                  else rng.integers(low_refs, high_refs + 1, size=count))  # stream unchanged
        draws = np.searchsorted(cumulative, rng.random(int(lengths.sum()) * 3))
        draws = np.minimum(draws, len(words) - 1)
        tokens = words[order[draws]]
        pos = 0
        for q in range(count):
            refs = []
            for j in range(high_refs):  # every length drawn is consumed: same stream
                if j < n_refs[q]:
                    refs.append(tokens[pos: pos + lengths[q, j]])
                pos += lengths[q, j]
            for s in range(systems):
                if produced == n_rows:
                    return
                base = list(refs[0])
                replace = rng.random(len(base)) < 0.3
                for i in np.flatnonzero(replace):
                    base[i] = tokens[pos % len(tokens)]
                    pos += 1
                cut = int(rng.integers(-most_cut, most_cut + 1))
                if cut < 0:
                    base = base[:cut] or base[:1]
                elif cut > 0:
                    base.extend(refs[-1][:cut])
                produced += 1
                yield {"id": f"q{start + q}", "system": f"sys{s}",
                       "prediction": " ".join(base),
                       "references": [" ".join(r) for r in refs]}


def write_jsonl(path: str, n_rows: int, **kwargs) -> int:
    """Writes `generate_rows(n_rows)` as JSONL; returns the bytes written."""
    size = 0
    with open(path, "w", encoding="utf-8") as f:
        for row in generate_rows(n_rows, **kwargs):
            line = json.dumps(row) + "\n"
            size += len(line)
            f.write(line)
    return size
