"""Metric names -> `Metric` instances, one instance per family.

A *family* is a set of columns that share work (bleu1..bleu4 share one tokenisation and one
n-gram count). `build_metrics(["bleu1", "bleu4", "em"])` returns one `BleuMetric` computing
("bleu1", "bleu4") and one `SquadMetric` computing ("em",), in registry order.

Options are keyed by family, e.g. `{"cider": {"df_mode": "pooled"}, "meteor": {"java":
"/usr/bin/java"}}`; each family declares the option names it accepts and its constructor
validates the values, so bad configuration fails here, on the launcher.

Model-backed families (bertscore, bi_encoder, sas, wes, bem, judge, square, kpqa) are rows of
`_BUILTIN` too, marked `model_backed`: the scoring pipeline runs them through
`RunInference` (transforms/scoring/score/run_model_metrics.py) instead of in process. Every model family accepts
the `ModelSpec` options (model, revision, device, dtype, max_length). More families are
added with `register_family(FamilySpec(...))`. Factories are dotted paths imported only
when the family is built, so importing the registry never pulls in torch or starts Java.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from transforms.metrics.base import Metric

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class FamilySpec:
    """How to build one metric family.

    Attributes:
        family: the family name, also the key of its options.
        columns: the metric names (output columns) the family can compute, in output order.
        factory: "module:attribute" of a callable `factory(columns=..., **options) -> Metric`.
        option_names: the option keys the factory accepts.
        model_backed: True when the family runs a neural model (routed to RunInference).
    """

    family: str
    columns: tuple[str, ...]
    factory: str
    option_names: frozenset[str] = frozenset()
    model_backed: bool = False

    def __post_init__(self) -> None:
        if not self.columns:
            raise ValueError(f"family {self.family!r} declares no columns")
        if ":" not in self.factory:
            raise ValueError(f"factory must be 'module:attribute', got {self.factory!r}")


_LEXICAL_OPTIONS = frozenset({"tokenizer", "java"})
# The `ModelSpec` fields every model-backed family accepts.
MODEL_OPTIONS = frozenset({"model", "revision", "device", "dtype", "max_length"})

_BUILTIN = (
    FamilySpec("squad", ("em", "f1"), "transforms.metrics.squad:SquadMetric"),
    FamilySpec("overlap", ("contains", "token_recall", "token_precision"),
               "transforms.metrics.overlap:OverlapMetric", frozenset({"boundary"})),
    FamilySpec("bleu", ("bleu1", "bleu2", "bleu3", "bleu4"), "transforms.metrics.bleu:BleuMetric",
               _LEXICAL_OPTIONS),
    FamilySpec("rouge", ("rougeL",), "transforms.metrics.rouge:RougeMetric",
               _LEXICAL_OPTIONS | {"beta"}),
    FamilySpec("cider", ("cider",), "transforms.metrics.cider:CiderMetric",
               _LEXICAL_OPTIONS | {"df_mode", "sigma"}),
    FamilySpec("meteor", ("meteor",), "transforms.metrics.meteor:MeteorMetric",
               _LEXICAL_OPTIONS | {"multi_ref", "max_heap", "jvm_options"}),
    FamilySpec("bertscore", ("bertscore", "bertscore_precision", "bertscore_recall"),
               "transforms.metrics.bertscore:BERTScoreMetric",
               MODEL_OPTIONS | {"layer", "idf", "baseline_path"}, model_backed=True),
    FamilySpec("bi_encoder", ("bi_encoder",), "transforms.metrics.model_metrics:BiEncoderMetric",
               MODEL_OPTIONS | {"layer"}, model_backed=True),
    FamilySpec("sas", ("sas",), "transforms.metrics.model_metrics:SASMetric",
               MODEL_OPTIONS | {"activation"}, model_backed=True),
    FamilySpec("wes", ("wes",), "transforms.metrics.model_metrics:WESMetric",
               MODEL_OPTIONS | {"activation"}, model_backed=True),
    FamilySpec("bem", ("bem",), "transforms.metrics.model_metrics:BEMMetric",
               MODEL_OPTIONS | {"activation", "segment_overflow"}, model_backed=True),
    FamilySpec("judge", ("judge",), "transforms.metrics.judge:JudgeMetric",
               MODEL_OPTIONS | {"activation", "segment_overflow", "gold_layout",
                                "max_gold_chars"}, model_backed=True),
    FamilySpec("square", ("square",), "transforms.metrics.model_metrics:SQuArEMetric",
               MODEL_OPTIONS | {"activation", "max_positive", "max_negative"},
               model_backed=True),
    FamilySpec("kpqa", ("kpqa_bleu1", "kpqa_rougeL", "kpqa_bertscore"),
               "transforms.metrics.kpqa:KPQAMetric",
               MODEL_OPTIONS | {"label", "encoder_model", "encoder_layer"}, model_backed=True),
)

# One line per metric name, for `qa-score --help` (`describe_metrics`). A family added
# with `register_family` that is not described here is listed with its family's name.
METRIC_DESCRIPTIONS = {
    "em": "exact match after SQuAD normalisation, max over references (0/1)",
    "f1": "SQuAD token F1, max over references",
    "contains": "1 if a normalised reference occurs in the normalised prediction",
    "token_recall": "share of a reference's tokens found in the prediction, max over references",
    "token_precision": "share of the prediction's tokens found in a reference, max over references",
    "bleu1": "BLEU with unigrams (coco-caption, PTB tokens), multi-reference",
    "bleu2": "BLEU up to bigrams (coco-caption), multi-reference",
    "bleu3": "BLEU up to trigrams (coco-caption), multi-reference",
    "bleu4": "BLEU up to 4-grams (coco-caption), multi-reference",
    "rougeL": "ROUGE-L F (LCS, beta 1.2, coco-caption), multi-reference",
    "cider": "CIDEr-D (tf-idf n-gram consensus, corpus document frequencies)",
    "meteor": "METEOR 1.5 (Java, coco-caption jar), multi-reference",
    "bertscore": "BERTScore F1 (greedy token matching of encoder embeddings)",
    "bertscore_precision": "BERTScore precision",
    "bertscore_recall": "BERTScore recall",
    "bi_encoder": "cosine of mean-pooled encoder embeddings, max over references",
    "sas": "semantic answer similarity: cross-encoder (STS-trained) score, max over references",
    "wes": "cross-encoder trained on WES entity pairs, max over references",
    "bem": "BERT answer-equivalence classifier (question, reference, candidate)",
    "judge": "answer-correctness judge (train_cross_encoder --format judge) on "
             "(answer, best-matching reference, question), the trainer's layout",
    "square": "SQuArE: cross-encoder against positive and negative references",
    "kpqa_bleu1": "BLEU-1 with tokens weighted by predicted keyphrase importance",
    "kpqa_rougeL": "ROUGE-L with tokens weighted by predicted keyphrase importance",
    "kpqa_bertscore": "BERTScore with tokens weighted by predicted keyphrase importance",
}

_FAMILIES: dict[str, FamilySpec] = {}
_COLUMN_TO_FAMILY: dict[str, str] = {}


def register_family(spec: FamilySpec) -> None:
    """Adds a family to the registry.

    Args:
        spec: the family; its name and columns must not be registered already.

    Raises:
        ValueError: the family or one of its columns is already registered.
    """
    if spec.family in _FAMILIES:
        raise ValueError(f"metric family {spec.family!r} is already registered")
    taken = [c for c in spec.columns if c in _COLUMN_TO_FAMILY]
    if taken:
        raise ValueError(f"metric names {taken} are already registered")
    _FAMILIES[spec.family] = spec
    for column in spec.columns:
        _COLUMN_TO_FAMILY[column] = spec.family


for _spec in _BUILTIN:
    register_family(_spec)


def available_metrics() -> list[str]:
    """Returns every buildable metric name, sorted."""
    return sorted(_COLUMN_TO_FAMILY)


def describe_metrics() -> dict[str, str]:
    """Every buildable metric name (sorted) -> one line saying what it is, and whether
    it runs a model."""
    out = {}
    for name in available_metrics():
        spec = _FAMILIES[_COLUMN_TO_FAMILY[name]]
        text = METRIC_DESCRIPTIONS.get(name, f"metric of the {spec.family} family")
        out[name] = f"{text} [model]" if spec.model_backed else text
    return out


def families_of(names: Sequence[str]) -> set[str]:
    """The families of metric names.

    Raises:
        ValueError: unknown names (all of them listed, with what is available).
    """
    unknown = [n for n in names if n not in _COLUMN_TO_FAMILY]
    if unknown:
        raise ValueError(_unknown_message(unknown))
    return {_COLUMN_TO_FAMILY[n] for n in names}


def family_of(name: str) -> str:
    """Returns the family of a metric name.

    Raises:
        ValueError: the name is unknown.
    """
    if name not in _COLUMN_TO_FAMILY:
        raise ValueError(_unknown_message([name]))
    return _COLUMN_TO_FAMILY[name]


def _unknown_message(unknown: Sequence[str]) -> str:
    close = {n: difflib.get_close_matches(n, available_metrics(), n=1) for n in unknown}
    hints = ", ".join(f"{n} -> {c[0]}" for n, c in sorted(close.items()) if c)
    return (f"unknown metric name(s) {sorted(set(unknown))}"
            + (f" (did you mean: {hints}?)" if hints else "")
            + f"; available: {available_metrics()}")


def family_spec(family: str) -> FamilySpec:
    """Returns the spec of a registered family.

    Raises:
        ValueError: the family is unknown.
    """
    if family not in _FAMILIES:
        raise ValueError(f"unknown metric family {family!r}; families: {sorted(_FAMILIES)}")
    return _FAMILIES[family]


def model_families() -> list[str]:
    """The registered model-backed families, in registry order."""
    return [f for f, spec in _FAMILIES.items() if spec.model_backed]


def _load_factory(path: str) -> Any:
    module_name, _, attr = path.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def build_metrics(
    names: Sequence[str], options: Mapping[str, Any] | None = None
) -> list[Metric]:
    """Builds one `Metric` per family covering the requested names.

    Args:
        names: metric names (see `available_metrics()`); duplicates are ignored.
        options: per-family option mappings, `{family: {option: value}}`. Options for a
            family that is registered but not requested are ignored.

    Returns:
        The metrics in registry order, each computing only its requested columns.

    Raises:
        ValueError: an unknown name, an empty request, an unknown family or option key,
            or an option value that the family rejects.
    """
    # Configuration errors are ValueError by contract, type errors included.
    if isinstance(names, str):
        raise ValueError(  # noqa: TRY004
            f"names must be a sequence of metric names, not the string {names!r}"
        )
    if not names:
        raise ValueError(f"no metric names given; available: {available_metrics()}")
    families_of(names)
    options = dict(options or {})
    bad_families = sorted(k for k in options if k not in _FAMILIES)
    if bad_families:
        raise ValueError(
            f"options given for unknown metric families {bad_families}; "
            f"families: {sorted(_FAMILIES)}"
        )
    requested = set(names)
    metrics: list[Metric] = []
    for family, spec in _FAMILIES.items():
        columns = tuple(c for c in spec.columns if c in requested)
        if not columns:
            continue
        family_options = options.get(family) or {}
        if not isinstance(family_options, Mapping):
            raise ValueError(  # noqa: TRY004
                f"options for family {family!r} must be a mapping, got {family_options!r}"
            )
        bad = sorted(set(family_options) - spec.option_names)
        if bad:
            raise ValueError(
                f"unknown options {bad} for metric family {family!r}; "
                f"accepted: {sorted(spec.option_names)}"
            )
        factory = _load_factory(spec.factory)
        metrics.append(factory(columns=columns, **family_options))
        logger.debug("built metric family %s with columns %s", family, columns)
    return metrics
