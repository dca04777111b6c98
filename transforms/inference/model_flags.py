"""The dedicated model flags of `qa-score`, stated once in `MODEL_FLAG_TABLE`: each
flag's command-line form (`add_model_flags`) and where its value goes, a metric option
of one model family, of every requested one, or a RunInference handler keyword
(`merge_model_flags`, which `config.build_config` calls)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from transforms.metrics import registry


@dataclasses.dataclass(frozen=True)
class ModelFlag:
    """One dedicated model flag, stated once: its command-line form (`add_model_flags`)
    and where its value goes (`merge_model_flags`).

    Attributes:
        name: the flag without `--`.
        help: its help text.
        family: for a flag of one metric family, the family; else None.
        option: the metric option it sets (of `family`, or of every requested model
            family when `family` is None); None for a RunInference handler flag.
        handler_key: for a handler flag, the handler keyword it sets.
        smallest: for a handler flag, its smallest valid value (None: not checked).
        type, choices, store_true: its argparse form.
    """

    name: str
    help: str
    family: str | None = None
    option: str | None = None
    handler_key: str | None = None
    smallest: int | None = None
    type: type | None = None
    choices: tuple[str, ...] | None = None
    store_true: bool = False

    def argparse_kwargs(self) -> dict[str, Any]:
        if self.store_true:
            return {"action": "store_true", "help": self.help}
        kwargs: dict[str, Any] = {"default": None, "help": self.help}
        if self.type is not None:
            kwargs["type"] = self.type
        if self.choices is not None:
            kwargs["choices"] = self.choices
        return kwargs


# What each model family's `--<family>_model` names.
_MODEL_KINDS = {
    "bertscore": "encoder (default: the packaged all-MiniLM-L6-v2)",
    "bi_encoder": "encoder (default: the packaged all-MiniLM-L6-v2)",
    "sas": "fine-tuned one-logit cross-encoder (required for sas)",
    "wes": "fine-tuned one-logit cross-encoder (required for wes)",
    "bem": "fine-tuned BEM classifier (required for bem)",
    "judge": "judge checkpoint of train_cross_encoder --format judge (or --format evouna) "
             "(required for judge)",
    "square": "fine-tuned SQuArE cross-encoder (required for square)",
    "kpqa": "keyphrase token classifier (required for kpqa_*)",
}
# The dedicated model flags, in --help order: `--<family>_model` for every model family,
# the few options users reach for (the rest go through --metric_options), the options
# every requested model family gets, and the RunInference handler's.
MODEL_FLAG_TABLE: tuple[ModelFlag, ...] = (
    *(ModelFlag(f"{family}_model",
                f"Hugging Face id or local path of the {_MODEL_KINDS[family]}.",
                family=family, option="model")
      for family in registry.model_families()),
    ModelFlag("bertscore_layer", "Hidden state for BERTScore (0 = embeddings; default last).",
              family="bertscore", option="layer", type=int),
    ModelFlag("bertscore_idf", "Weight BERTScore tokens by idf over the references.",
              family="bertscore", option="idf", store_true=True),
    ModelFlag("bertscore_baseline", "bert-score baseline file (LAYER,P,R,F) to rescale with.",
              family="bertscore", option="baseline_path"),
    ModelFlag("bi_encoder_layer", "Hidden state the bi-encoder mean-pools (default last).",
              family="bi_encoder", option="layer", type=int),
    ModelFlag("kpqa_encoder_model", "Encoder of kpqa_bertscore (default: packaged MiniLM).",
              family="kpqa", option="encoder_model"),
    ModelFlag("kpqa_encoder_layer", "Hidden state of kpqa_bertscore's encoder (default last).",
              family="kpqa", option="encoder_layer", type=int),
    ModelFlag("device", "Where models run (default auto: CUDA when present).",
              option="device", choices=("auto", "cpu", "cuda")),
    ModelFlag("dtype", "Model dtype (default auto: bf16/fp16 on CUDA, float32 on CPU).",
              option="dtype", choices=("auto", "float32", "bfloat16", "float16")),
    ModelFlag("model_max_length", "Truncate model inputs to N tokens (default: the model's).",
              option="max_length", type=int),
    ModelFlag("model_batch_size", "Model inputs per RunInference batch at most (default "
              "2048; rows are batched whole, weighed by their inputs).",
              handler_key="max_batch_size", smallest=1, type=int),
    ModelFlag("model_first_batch_size", "Model inputs of a worker's first RunInference "
              "batch; later ones double up to --model_batch_size (default 1/16 of it; "
              "equal to it: fixed batches).", handler_key="min_batch_size", smallest=1,
              type=int),
    ModelFlag("max_batch_tokens", "Padded tokens per forward pass at most (default 4096 on "
              "a CPU, 65536 on a GPU).", handler_key="max_batch_tokens", smallest=1, type=int),
    ModelFlag("share_model_across_processes",
              "One model copy per machine, shared by the SDK processes.",
              handler_key="share_model_across_processes", store_true=True),
    ModelFlag("model_copies",
              "With sharing: copies per machine, each a process of its own, all on the "
              "same device (more copies feed one GPU from more processes; they do not "
              "spread over several GPUs).",
              handler_key="model_copies", smallest=1, type=int),
    ModelFlag("model_cache_size", "Model outputs kept per process for repeated inputs.",
              handler_key="cache_size", smallest=0, type=int),
)
MODEL_FLAGS = tuple(flag.name for flag in MODEL_FLAG_TABLE)
MODEL_FLAGS_TITLE = ("models (the model-backed metrics: bertscore, bi_encoder, sas, wes, bem, "
                     "judge, square, kpqa_*)")


def add_model_flags(parser) -> None:
    """Adds the dedicated model flags (`MODEL_FLAG_TABLE`) to an argparse parser, as one
    argument group."""
    group = parser.add_argument_group(MODEL_FLAGS_TITLE)
    for flag in MODEL_FLAG_TABLE:
        group.add_argument(f"--{flag.name}", **flag.argparse_kwargs())


def merge_model_flags(options: Mapping[str, Any], flags: Mapping[str, Any],
                      names: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Folds the dedicated model flags into the per-family metric options.

    Args:
        options: `--metric_options`, by family.
        flags: flag name (see `MODEL_FLAGS`) -> value; None or False = not given.
        names: the requested metric names.

    Returns:
        (metric options with the flags folded in, RunInference handler keyword arguments).

    Raises:
        ValueError: an unknown metric name; a flag and `--metric_options` that set one
            option to different values; a model flag given for a metric family that was
            not requested; a bad handler value.
    """
    merged = {family: dict(value) if isinstance(value, Mapping) else value
              for family, value in options.items()}
    requested = registry.families_of(names)
    given = {flag: value for flag, value in flags.items()
             if value is not None and value is not False}
    handler = {}
    for flag in MODEL_FLAG_TABLE:
        if flag.name not in given:
            continue
        value = given[flag.name]
        if flag.handler_key is not None:
            if flag.smallest is not None and value < flag.smallest:
                raise ValueError(f"--{flag.name} must be >= {flag.smallest}, got {value}")
            handler[flag.handler_key] = value
        elif flag.family is not None:
            if flag.family not in requested:
                raise ValueError(f"--{flag.name} is given but no {flag.family} metric is "
                                 f"requested (--metrics); the {flag.family} metrics are "
                                 f"{list(registry.family_spec(flag.family).columns)}")
            _set_option(merged, flag.family, flag.option, value, f"--{flag.name}")
        else:
            for family in registry.model_families():
                if family in requested:
                    _set_option(merged, family, flag.option, value, f"--{flag.name}")
    first = handler.get("min_batch_size")
    if first is not None:  # named by its flags here; the handler checks it again
        from transforms.models.predictors import DEFAULT_MAX_BATCH_ROWS  # not at every launch

        largest = handler.get("max_batch_size", DEFAULT_MAX_BATCH_ROWS)
        if first > largest:
            raise ValueError(f"--model_first_batch_size {first} is larger than "
                             f"--model_batch_size {largest}")
    if "model_copies" in handler and not handler.get("share_model_across_processes"):
        raise ValueError("--model_copies needs --share_model_across_processes")
    return merged, handler


def _set_option(options: dict[str, Any], family: str, option: str, value: Any,
                flag: str) -> None:
    family_options = options.setdefault(family, {})
    if not isinstance(family_options, dict):
        return  # build_metrics rejects a non-mapping with its own message
    if option in family_options and family_options[option] != value:
        raise ValueError(f"{flag}={value!r} contradicts --metric_options "
                         f"{family}.{option}={family_options[option]!r}: give one of them")
    family_options[option] = value
