"""CIDEr-D as coco-caption's `CiderScorer` (n = 4, sigma = 6), on PTB token strings.

CIDEr-D needs corpus statistics: the document frequency df of every n-gram over the
references, and ref_len = log(number of documents). They are a `CorpusStatistic`.

`df_mode` (default "per_position"): reference position j of every example forms its own
single-reference corpus, so df and the corpus size of position j come from the j-th
references alone, and the score of an example is the maximum over positions of its
CIDEr-D against reference j. This is how the released KPQA values were made (each
reference column scored as its own coco corpus, then the maximum over columns).
`df_mode="pooled"`: one corpus with one document per example (the union of its
references' n-grams, as coco does with several references); each reference is then scored
on its own against those statistics and the maximum taken.

Within a corpus the arithmetic follows coco operation by operation (numpy's log for the
idf, coco's quirks kept: the length penalty uses bigram counts as "length", an n-gram unseen
in the references gets idf log(N)), so the values are bit-identical.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from transforms.metrics.base import CorpusStatistic, MetricInputError, QAExample
from transforms.metrics.lexical import LexicalMetric, TokenizedExample, text_ngrams, tokenize_texts

N = 4
DEFAULT_SIGMA = 6.0
DF_MODES = ("per_position", "pooled")
POOLED = -1  # the corpus key in pooled mode


class CiderCorpus(NamedTuple):
    """Extracted statistics of one corpus.

    Attributes:
        ref_len: log(number of documents), as numpy computes it.
        log_df: n-gram -> log(max(1, df)) (numpy's log), for n-grams with df >= 1.
        size: number of documents.
    """

    ref_len: float
    log_df: dict[tuple[str, ...], float]
    size: int


class CiderDocumentFrequency(CorpusStatistic):
    """Document frequencies of reference n-grams, per reference position or pooled.

    Accumulator: {corpus key: [documents, Counter(n-gram -> df)]}; the key is the
    reference position (0-based) or `POOLED`.
    """

    def __init__(self, df_mode: str = "per_position", tokenizer: str = "python",
                 java: str = "java") -> None:
        if df_mode not in DF_MODES:
            raise ValueError(f"df_mode must be one of {DF_MODES}, got {df_mode!r}")
        self.df_mode = df_mode
        self.tokenizer = tokenizer
        self.java = java
        self.key = f"cider_df:{df_mode}"

    def create(self) -> dict[int, list]:
        return {}

    def add(self, accumulator: dict[int, list], example: QAExample) -> dict[int, list]:
        if not example.references:
            raise MetricInputError("example has no references")
        self.add_tokenized(accumulator, tokenize_texts(example.references, self.tokenizer,
                                                       self.java))
        return accumulator

    def add_tokenized(self, accumulator: dict[int, list], references: Sequence[str]) -> None:
        """Adds one example given its tokenised references."""
        for key, doc in document_ngrams(references, self.df_mode):
            entry = accumulator.get(key)
            if entry is None:
                entry = accumulator[key] = [0, Counter()]
            entry[0] += 1
            entry[1].update(doc)

    def merge(self, accumulators: Sequence[dict[int, list]]) -> dict[int, list]:
        merged: dict[int, list] = {}
        for acc in accumulators:
            for key, (docs, df) in acc.items():
                entry = merged.setdefault(key, [0, Counter()])
                entry[0] += docs
                entry[1].update(df)
        return merged

    def extract(self, accumulator: dict[int, list]) -> dict[int, CiderCorpus]:
        return {key: corpus_of(docs, df) for key, (docs, df) in accumulator.items()}


def corpus_keys(n_references: int, df_mode: str) -> list[int]:
    """The corpus key each of an example's references is scored against, in order."""
    return [POOLED] * n_references if df_mode == "pooled" else list(range(n_references))


def document_ngrams(references: Sequence[str], df_mode: str
                    ) -> list[tuple[int, Collection[tuple[str, ...]]]]:
    """The documents one example adds to the corpora: (corpus key, its distinct n-grams).

    per_position: one document per reference, in corpus j for reference j; pooled: one
    document, the union of the references' n-grams, in corpus `POOLED`.
    """
    if df_mode == "pooled":
        return [(POOLED, set().union(*(c for r in references for c in text_ngrams(r))))]
    # one reference is one document: its distinct n-grams are the keys of its counts
    return [(j, [g for c in text_ngrams(r) for g in c]) for j, r in enumerate(references)]


def needed_ngrams(prediction: str, references: Sequence[str], df_mode: str
                  ) -> dict[int, set[tuple[str, ...]]]:
    """Corpus key -> the n-grams whose document frequency `cider_d` reads for this example
    (the prediction's and the reference's n-grams, per corpus a reference is scored in)."""
    hyp = [g for c in text_ngrams(prediction) for g in c]
    out: dict[int, set[tuple[str, ...]]] = {}
    for key, reference in zip(corpus_keys(len(references), df_mode), references, strict=True):
        grams = out.setdefault(key, set(hyp))
        grams.update(g for c in text_ngrams(reference) for g in c)
    return out


def log_dfs(df: Mapping[tuple[str, ...], int]) -> dict[tuple[str, ...], float]:
    """n-gram -> log(max(1, df)), with numpy's scalar log, one call per distinct df, as coco
    calls it (its array (SIMD) log can differ in the last bit on some CPUs)."""
    logs = {d: float(np.log(max(1.0, float(d)))) for d in set(df.values())}
    return {g: logs[d] for g, d in df.items()}


def corpus_of(docs: int, df: Mapping[tuple[str, ...], int]) -> CiderCorpus:
    """The `CiderCorpus` of `docs` documents with document frequencies `df`.

    `df` may be any subset of the corpus' frequencies that holds every n-gram the scored
    examples read with df >= 2: an n-gram with df 0 or 1 has log(max(1, df)) = 0, the value
    `cider_d` uses for an n-gram it does not find, so leaving it out changes no value (the
    corpus size `docs`, which sets ref_len, must be the whole corpus').
    """
    return CiderCorpus(float(np.log(float(docs))), log_dfs(df), docs)


def _vec(counts: Sequence[Counter], corpus: CiderCorpus):
    """coco's counts2vec: tf-idf vectors per order, their norms, and the bigram 'length'."""
    ref_len = corpus.ref_len
    get = corpus.log_df.get
    vecs = []
    norms = []
    for order in counts:
        vec = {g: tf * (ref_len - get(g, 0.0)) for g, tf in order.items()}
        norm = 0.0
        for v in vec.values():  # coco's order of summation, for bit-identical norms
            norm += v**2  # C pow(), as coco's pow(): it can differ from v * v in the last bit
        vecs.append(vec)
        norms.append(math.sqrt(norm))
    length = sum(counts[1].values()) if len(counts) > 1 else 0
    return vecs, norms, length


def _sim(hyp, ref, sigma: float) -> float:
    """coco's sim + averaging for one reference: 10 * mean over orders."""
    vec_h, norm_h, len_h = hyp
    vec_r, norm_r, len_r = ref
    delta = float(len_h - len_r)
    penalty = math.e ** (-(delta**2) / (2 * sigma**2))
    total = 0.0
    for vh, vr, nh, nr in zip(vec_h, vec_r, norm_h, norm_r, strict=True):
        val = 0.0
        get = vr.get
        for gram, x in vh.items():
            y = get(gram)
            if y is not None:  # absent n-grams add exactly 0.0 in coco (weights are >= 0)
                val += (y if y < x else x) * y
        if nh != 0 and nr != 0:
            val /= nh * nr
        total += val * penalty
    return total / len(vec_h) / 1 * 10.0


def cider_d(
    prediction: str, references: Sequence[str], corpora: Sequence[CiderCorpus],
    sigma: float = DEFAULT_SIGMA,
) -> float:
    """CIDEr-D of a tokenised prediction: max over references, reference i against corpora[i].

    Raises:
        ValueError: references and corpora differ in number, or there are none.
    """
    if not references or len(references) != len(corpora):
        raise ValueError(f"need one corpus per reference, got {len(references)} references "
                         f"and {len(corpora)} corpora")
    hyp_counts = text_ngrams(prediction)
    best = -math.inf
    for reference, corpus in zip(references, corpora, strict=True):
        ref_vec = _vec(text_ngrams(reference), corpus)
        best = max(best, _sim(_vec(hyp_counts, corpus), ref_vec, sigma))
    return best


class CiderMetric(LexicalMetric):
    """The `cider` family: column cider (CIDEr-D).

    Args:
        df_mode: "per_position" (default, KPQA's protocol) or "pooled"; see module doc.
        sigma: the length-penalty width (coco: 6).
        **kwargs: see `LexicalMetric`.

    Raises:
        ValueError: an unknown df_mode or a non-positive sigma.
    """

    family = "cider"
    ALL_COLUMNS = ("cider",)

    def __init__(self, columns: Sequence[str] | None = None, df_mode: str = "per_position",
                 sigma: float = DEFAULT_SIGMA, **kwargs: Any) -> None:
        super().__init__(columns, **kwargs)
        if isinstance(sigma, bool) or not isinstance(sigma, int | float) or not sigma > 0:
            raise ValueError(f"sigma must be a positive number, got {sigma!r}")
        self.sigma = float(sigma)
        self.statistic = CiderDocumentFrequency(df_mode, self.tokenizer, self.java)

    @property
    def df_mode(self) -> str:
        return self.statistic.df_mode

    def _details(self) -> dict[str, str]:
        return {"n": str(N), "sigma": str(self.sigma), "df": self.df_mode}

    def corpus_statistics(self) -> tuple[CorpusStatistic, ...]:
        return (self.statistic,)

    def score_tokenized(
        self, examples: Sequence[TokenizedExample], corpus_stats: dict[str, Any]
    ) -> list[dict[str, float]]:
        try:
            corpora: dict[int, CiderCorpus] = corpus_stats[self.statistic.key]
        except KeyError:
            raise ValueError(
                f"corpus_stats lacks {self.statistic.key!r}; run corpus_statistics() first"
            ) from None
        out = []
        for ex in examples:
            keys = corpus_keys(len(ex.references), self.df_mode)
            missing = [k for k in keys if k not in corpora]
            if missing:
                raise MetricInputError(f"no CIDEr corpus statistics for reference position(s) "
                                       f"{missing}")
            out.append({"cider": cider_d(ex.prediction, ex.references,
                                         [corpora[k] for k in keys], self.sigma)})
        return out
