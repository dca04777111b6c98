"""Fine-tuning of the learned metrics (plain PyTorch + transformers, no Beam).

| module | what |
|---|---|
| `pair_data` | cross-encoder rows: WES Parquet shards, STS-B, SQuArE and BEM JSONL; validation |
| `squad_data` | KPQA keyphrase examples from SQuAD JSON, article split, word-piece labels |
| `batching` | length-grouped batch order (deterministic per seed and epoch), padding |
| `evaluation` | accuracy, AUROC, Pearson/Spearman, keyphrase token and span F1 |
| `config` | `TrainConfig`: hyper-parameters, budgets and runtime settings, validated; the options a resume must keep |
| `loop` | `Trainer`: budgets, warm-up schedule, AMP, dev metrics, best/last checkpoints, resume |
| `checkpoint` | output-folder policy, atomic checkpoint writes, trainer state |
| `card` | `model_card.md` and `metrics.json` |
| `options` | the command-line flags shared by the entry points -> `TrainConfig` |
| `short_answers` | the judge's pair data (command): WES and EVOUNA pairs, the train mix, the files |
| `squad_pairs` | SQuAD pairs for the judge: answer kinds, passage spans, positives, hard negatives |
| `answer_pair` | `AnswerPair`, the record every short-answer source makes, and its seeded draws |
| `cross_encoder`, `keyphrase` | the two training runs the entry points in `pipelines/` call |

Model inputs are built with `transforms.models.layouts`, the functions the scorer uses,
so a trained model and its metric cannot disagree on the input layout.
"""
