"""Command-line flags shared by the training entry points, and their `TrainConfig`."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Sequence
from typing import Any

from transforms.io import cli
from transforms.training.config import PRECISIONS, TrainConfig

DEVICES = ("auto", "cpu", "cuda")


def add_train_args(parser: argparse.ArgumentParser, *, batch_size: int = 32,
                   learning_rate: float = 5e-5, epochs: int = 1) -> None:
    """Adds output, budget, optimisation and runtime flags (defaults per entry point)."""
    g = parser.add_argument_group("output and resumption")
    g.add_argument("--output", required=True, type=cli.output_path, help="output folder (the best checkpoint, "
                   "model_card.md, metrics.json, last/ for --resume)")
    g.add_argument("--resume", action="store_true",
                   help="continue the run in OUTPUT/last (same data and hyper-parameters)")
    g.add_argument("--overwrite", action="store_true", help="delete an earlier run in OUTPUT")
    g = parser.add_argument_group("budget")
    g.add_argument("--epochs", type=int, default=epochs, help=f"passes over train (default {epochs})")
    g.add_argument("--max_steps", type=int, default=None,
                   help="optimizer steps; overrides --epochs and sets the schedule length")
    g.add_argument("--max_minutes", type=float, default=None,
                   help="wall-clock stop for this invocation (resumable; the schedule is kept)")
    g = parser.add_argument_group("optimisation")
    g.add_argument("--seed", type=int, default=13, help="seed of head init, batches, dropout")
    g.add_argument("--batch_size", type=int, default=batch_size, help=f"default {batch_size}")
    g.add_argument("--learning_rate", "--lr", type=float, default=learning_rate,
                   help=f"peak AdamW learning rate (default {learning_rate:g})")
    g.add_argument("--weight_decay", type=float, default=0.01, help="default 0.01")
    g.add_argument("--warmup_ratio", type=float, default=0.1,
                   help="linear warm-up share of the steps, then linear decay (default 0.1)")
    g.add_argument("--max_grad_norm", type=float, default=1.0, help="gradient clipping")
    g.add_argument("--block_batches", type=int, default=20,
                   help="batches per length-sorting block; 1 = random batches (default 20)")
    g = parser.add_argument_group("evaluation and checkpoints")
    g.add_argument("--eval_every", type=int, default=None,
                   help="dev metrics every N steps (always at epoch ends and the end)")
    g.add_argument("--save_every", type=int, default=200,
                   help="write OUTPUT/last every N steps (and at every evaluation)")
    g.add_argument("--eval_first", action="store_true", help="dev metrics before training too")
    g.add_argument("--eval_batch_size", type=int, default=128,
                   help="pairs per evaluation forward pass")
    g.add_argument("--log_every", type=int, default=10, help="steps per loss-curve point")
    g = parser.add_argument_group("runtime")
    g.add_argument("--device", choices=DEVICES, default="auto",
                   help="auto: CUDA when present, else CPU (the CUDA path is untested on a GPU: every "
                        "measured training run is on CPU)")
    g.add_argument("--precision", choices=PRECISIONS, default="auto",
                   help="auto: bf16 (else fp16) autocast on CUDA, fp32 on CPU")
    g.add_argument("--num_threads", type=int, default=None,
                   help="torch CPU threads (default: torch's; 1 per job when jobs share cores)")
    g.add_argument("--no_progress", action="store_true", help="no progress bar")
    cli.add_runtime_arguments(g, progress=False)


def train_config(args: argparse.Namespace) -> TrainConfig:
    """The `TrainConfig` of parsed flags (validated: ValueError on bad values)."""
    return TrainConfig(
        output_dir=args.output, seed=args.seed, epochs=args.epochs, max_steps=args.max_steps,
        max_minutes=args.max_minutes, batch_size=args.batch_size,
        eval_batch_size=args.eval_batch_size, learning_rate=args.learning_rate,
        weight_decay=args.weight_decay, warmup_ratio=args.warmup_ratio,
        max_grad_norm=args.max_grad_norm, block_batches=args.block_batches,
        eval_every=args.eval_every, save_every=args.save_every, eval_first=args.eval_first,
        log_every=args.log_every, num_threads=args.num_threads, device=args.device,
        precision=args.precision, progress=not args.no_progress, resume=args.resume,
        overwrite=args.overwrite)


def _setup_logging(verbose: bool) -> None:
    from transformers.utils import logging as hf_logging
    cli.configure_logging(verbose)
    # One progress bar (ours); the fresh head's load report is expected, not news.
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    for noisy in ("httpx", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def cli_main(run: Callable[[Sequence[str] | None], Any], argv: Sequence[str] | None,
             prog: str = "train") -> int:
    """Runs an entry point with INFO logging routed around the progress bar
    (`transforms.io.cli.run_main`): a `ValueError` (bad flags, bad input, before
    training starts) ends in one line on stderr and exit status 2, `--verbose` adds its
    traceback."""
    from tqdm.contrib.logging import logging_redirect_tqdm

    def body(args: list[str]) -> None:
        with logging_redirect_tqdm():
            run(args)

    return cli.run_main(prog, body, argv, user_errors=(ValueError,),
                        setup_logging=_setup_logging)
