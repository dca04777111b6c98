"""METEOR 1.5 through the jar shipped in pycocoevalcap, with coco-caption's protocol.

One METEOR JVM per metric instance (transforms/text/meteor_jvm.py: the process and its
-stdio protocol), taken in `setup()` (or on first use) and given back in `teardown()` to the
process's idle JVMs, which the next METEOR metric of the process reuses; identical pairs of
a batch are scored once.

Several references: each pair is scored with a single reference and the maximum taken
(KPQA's one-corpus-per-reference-column protocol; coco's own SCORE line with several
references, which lets METEOR pick the best-aligned one, is the `multi_ref="coco"` option).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from transforms.metrics.lexical import LexicalMetric, TokenizedExample
from transforms.text import meteor_jvm
from transforms.text.meteor_jvm import DEFAULT_JVM_OPTIONS, MeteorProcess

logger = logging.getLogger(__name__)

MULTI_REF_MODES = ("max", "coco")


class MeteorMetric(LexicalMetric):
    """The `meteor` family: column meteor.

    Args:
        multi_ref: "max" (default: one score per reference, maximum taken) or "coco" (all
            references in one SCORE line, METEOR's own multi-reference scoring).
        max_heap: JVM -Xmx value (coco: "2G").
        jvm_options: JVM flags that do not change results (default `DEFAULT_JVM_OPTIONS`).
        **kwargs: see `LexicalMetric`.

    Raises:
        ValueError: an unknown multi_ref, a malformed max_heap or jvm_options.
    """

    family = "meteor"
    ALL_COLUMNS = ("meteor",)

    def __init__(self, columns: Sequence[str] | None = None, multi_ref: str = "max",
                 max_heap: str = "2G", jvm_options: Sequence[str] = DEFAULT_JVM_OPTIONS,
                 **kwargs: Any) -> None:
        super().__init__(columns, **kwargs)
        if multi_ref not in MULTI_REF_MODES:
            raise ValueError(f"multi_ref must be one of {MULTI_REF_MODES}, got {multi_ref!r}")
        if not (isinstance(max_heap, str) and max_heap[:-1].isdigit()
                and max_heap[-1] in "kKmMgG"):
            raise ValueError(f"max_heap must look like '2G' or '512m', got {max_heap!r}")
        if isinstance(jvm_options, str) or not all(
                isinstance(o, str) and o.startswith("-") for o in jvm_options):
            raise ValueError(f"jvm_options must be a list of '-...' flags, got {jvm_options!r}")
        self.multi_ref = multi_ref
        self.max_heap = max_heap
        self.jvm_options = tuple(jvm_options)
        self._process: MeteorProcess | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_process"] = None  # a JVM handle does not travel; setup() starts a new one
        return state

    def _details(self) -> dict[str, str]:
        return {"meteor": "1.5 -l en -norm", "multi_ref": self.multi_ref}

    def setup(self) -> None:
        if self._process is None or not self._process.alive:
            self._process = meteor_jvm.take(self.java, self.max_heap, self.jvm_options)

    def teardown(self) -> None:
        if self._process is not None:
            meteor_jvm.give_back(self._process)
            self._process = None

    def score_tokenized(
        self, examples: Sequence[TokenizedExample], corpus_stats: dict[str, Any]
    ) -> list[dict[str, float]]:
        if self._process is None or not self._process.alive:
            logger.info("METEOR used before setup(); starting the JVM now")
            self.setup()
        if self.multi_ref == "coco":
            pairs = [(ex.prediction, tuple(ex.references)) for ex in examples]
        else:
            pairs = [(ex.prediction, (r,)) for ex in examples for r in ex.references]
        unique = list(dict.fromkeys(pairs))
        scores = dict(zip(unique, self._process.score_pairs(unique), strict=True))
        out = []
        pos = 0
        for ex in examples:
            k = 1 if self.multi_ref == "coco" else len(ex.references)
            out.append({"meteor": max(scores[p] for p in pairs[pos: pos + k])})
            pos += k
        return out
