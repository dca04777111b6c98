"""A zero-cost stand-in for a transformers model, for benchmarks of the host side.

`ZeroCostModel` has the checkpoint's config and answers a forward call with outputs of
the real shapes (`logits` (rows, labels), `last_hidden_state` (rows, longest, hidden),
`hidden_states`) filled with zeros, without computing anything, and BERTScore's greedy
match on the device gives zero maxima: what the host side of the model branch costs is
then all that is measured. `zero_cost_models()` is a context
manager under which `transforms.models.torch_models.load_model` gives such models (the
in-process runner loads models in this process, so the pipeline picks them up).

`python -m tests.bench.zero_model QA-SCORE-FLAGS` runs `qa-score` with them; with
`--direct_running_mode=multi_processing` the SDK worker processes (and the process that
serves a shared model) are fresh interpreters, so they get them through a
`sitecustomize.py` put first on their PYTHONPATH (`ZERO_COST_MODELS=1`): without it they
would load and run the real model, and a multi-process run would measure the CPU's
forward passes instead of the host work.

`ZERO_COST_DEVICE_S_PER_ROW=S` (inherited too) makes each forward pass hold one lock of
its process for S seconds per row of the pass, asleep (the GIL released): a device that
takes time and runs one pass at a time, as a GPU's stream does, so that a run of worker
processes sharing one copy shows what waiting for the device does to them (how
windows that double are measured on a CPU). The lock is per process: one device per served
copy, so with `--model_copies N` (or workers with models of their own) N devices run
side by side, where real copies share one GPU. S x the rows per second through the
branch is the stand-in's busy share only where each row is one row of one pass (the
judge on new answers); SAS and BERTScore send a pass row per gold, and repeated inputs
(de-duplication, the output cache) send fewer.

`ZERO_COST_DISPATCH=1` (inherited by those processes) gives each stand-in a shadow: the
checkpoint's architecture with every width cut to 16, run on the same ids and masks
before the zeros are returned. Its passes make as many operator calls as the real
model's, each with next to no arithmetic, as on a GPU, where the host pays each
operator's dispatch and little else: what a process that serves the model pays per pass
in Python and in GIL hand-overs (model_server.py) is then measured too.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import torch

from transforms.models import loading, torch_models

# the stand-in device: one pass at a time per process (ZERO_COST_DEVICE_S_PER_ROW)
_DEVICE = threading.Lock()


class ZeroCostModel(torch.nn.Module):
    """The outputs of `auto_class`'s model for the checkpoint's config, all zeros."""

    def __init__(self, config: Any, auto_class: str, dispatch: bool = False) -> None:
        super().__init__()
        self.config = config
        self.auto_class = auto_class
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # gives the model a device
        # what torch_models.truncate_layers looks for, so a layer choice is accepted
        self.encoder = SimpleNamespace(layer=torch.nn.ModuleList())
        self.shadow = _shadow(config) if dispatch else None
        self.device_s_per_row = float(os.environ.get("ZERO_COST_DEVICE_S_PER_ROW") or 0)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None,
                output_hidden_states: bool = False) -> SimpleNamespace:
        rows, longest = input_ids.shape
        if self.device_s_per_row:
            with _DEVICE:
                time.sleep(rows * self.device_s_per_row)
        if self.shadow is not None:
            self.shadow(input_ids=input_ids, attention_mask=attention_mask,
                        token_type_ids=token_type_ids)
        if self.auto_class == "AutoModelForSequenceClassification":
            return SimpleNamespace(logits=torch.zeros(rows, self.config.num_labels))
        if self.auto_class == "AutoModelForTokenClassification":
            return SimpleNamespace(logits=torch.zeros(rows, longest, self.config.num_labels))
        hidden = torch.zeros(rows, longest, self.config.hidden_size)
        states = (hidden,) * (self.config.num_hidden_layers + 1) if output_hidden_states else None
        return SimpleNamespace(last_hidden_state=hidden, hidden_states=states)


def _shadow(config: Any) -> torch.nn.Module:
    """The checkpoint's architecture, every width 16 (one attention head): the real
    model's operator calls, next to none of its arithmetic."""
    import copy

    from transformers import AutoModel

    small = copy.deepcopy(config)
    small.hidden_size, small.num_attention_heads, small.intermediate_size = 16, 1, 16
    return AutoModel.from_config(small).eval()


def zero_cost_greedy_match(table: torch.Tensor, plan: Any,
                           indices: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """`matching.greedy_match`'s outputs (every pair's token maxima, in pair order), all
    zeros, without the batched matrix products: BERTScore's match is the device's work
    (on a GPU the host only launches it), so the host side is measured without it."""
    return (torch.zeros(len(indices[-2]), device=table.device),
            torch.zeros(len(indices[-1]), device=table.device))


@contextlib.contextmanager
def zero_cost_models() -> Iterator[None]:
    """`torch_models.load_model` gives `ZeroCostModel`s, and BERTScore's greedy match
    (`matching.greedy_match`) gives zeros, while the context is open."""
    from transformers import AutoConfig

    from transforms.models import matching

    real, real_match = torch_models.load_model, matching.greedy_match

    def load(spec: loading.ModelSpec, auto_class: str = "AutoModel", **kwargs: Any) -> Any:
        config = AutoConfig.from_pretrained(spec.model, revision=spec.revision,
                                            trust_remote_code=False)
        dispatch = os.environ.get("ZERO_COST_DISPATCH") == "1"
        return ZeroCostModel(config, auto_class, dispatch=dispatch).eval()

    torch_models.load_model, matching.greedy_match = load, zero_cost_greedy_match
    try:
        yield
    finally:
        torch_models.load_model, matching.greedy_match = real, real_match


_SITECUSTOMIZE = """\
import os
if os.environ.get("ZERO_COST_MODELS") == "1":
    from tests.bench.zero_model import zero_cost_models
    # kept: the context restores the real loader when it is collected
    ZERO_COST = zero_cost_models()
    ZERO_COST.__enter__()  # for the life of this process
"""


@contextlib.contextmanager
def zero_cost_subprocesses() -> Iterator[None]:
    """Python processes started while the context is open (with this environment) load
    zero-cost models too: a `sitecustomize.py` first on their PYTHONPATH applies
    `zero_cost_models` at their start."""
    import tempfile
    from pathlib import Path

    repo = str(Path(__file__).resolve().parents[2])
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "ZERO_COST_MODELS")}
    with tempfile.TemporaryDirectory(prefix="zero_cost_") as site:
        Path(site, "sitecustomize.py").write_text(_SITECUSTOMIZE)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (site, repo, saved["PYTHONPATH"]) if p)
        os.environ["ZERO_COST_MODELS"] = "1"
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def main(argv: list[str] | None = None) -> int:
    """`python -m tests.bench.zero_model QA-SCORE-FLAGS`: `qa-score` with zero-cost
    models, in this process and any worker processes it starts, for memory and
    host-speed runs. From the command line (no `argv`) the process is the run's own, as
    `qa-score`'s is, and the run tunes it the same way (`run(tune_local=True)`: the
    workers' tokenizer threads share the cores, and the launcher starts the shared
    copies)."""
    from pipelines import score_predictions

    with zero_cost_models(), zero_cost_subprocesses():
        return score_predictions.main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
