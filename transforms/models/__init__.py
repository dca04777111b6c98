"""Models: the leaf layer (imports nothing else of this project).

- loading.py: `ModelSpec` (checkpoint, revision, device, dtype, max length), safe
  loading (safetensors first, pickled weights refused unless allowed), the packaged
  all-MiniLM-L6-v2, tokenizers (`TokenIds`).
- torch_models.py: a checkpoint's model in torch on a worker: its device and dtype,
  `load_model`, layers truncated and token types grown in place.
- uses.py: `ModelUse`, what a metric needs from a model (task, layer, activation, class,
  segments), its constructors that check a checkpoint's head, and the output types
  (`TokenEmbeddings`, `TokenScores`).
- layouts.py: how texts become model inputs (pairs, BEM's three segments, SQuArE's one
  string, keyphrase inputs), shared by training and scoring.
- batching.py: token-budgeted, length-sorted padding.
- matching.py: BERTScore's greedy match, planned on the host (numpy), run on the device.
- device.py: a model on its device, padded passes in, arrays out (torch, no Beam).
- predictors.py: its host side: distinct inputs encoded, grouped into passes, outputs
  per input (an LRU cache in front).
- baselines.py: bert-score rescale baseline files.

Above it: transforms/metrics declares `ModelUse`s and folds outputs; transforms/scoring
runs them through Beam's `RunInference`; transforms/training fine-tunes checkpoints.
"""
