"""What every command line of this project shares: help, unknown flags, one-line errors,
logging.

- `ArgumentParser` is each entry point's parser and the source of truth of its flags:
  `--help` prints every flag with its default, in the groups the entry point made
  (input, output, metrics, models, runtime); the Beam pipelines declare the same flags
  to Beam through their `PipelineOptions` classes, from the same function.
- `parse_flags` parses our flags, then asks Beam's own parser (every `PipelineOptions`
  subclass: Beam's, the runners' — Dataflow, Flink, Spark, Portable, Prism — and ours)
  which of the rest it knows. Anything neither knows is a `UsageError` naming the flag
  and the closest valid one (difflib), raised before any pipeline is built. (Beam itself
  only warns "Discarding unparseable args" and runs on.)
- `run_main` runs an entry point: logging on our loggers at INFO (Beam's at WARNING, the
  spurious "apitools not found" warning dropped), and a user mistake (`UsageError`, or
  whatever `user_errors` names) ends in one line on stderr and exit status 2;
  `--verbose` adds the traceback and Beam's INFO logs.
"""

import argparse
import difflib
import logging
import re
import sys
import traceback
from collections.abc import Callable, Iterable, Sequence
from typing import Any

logger = logging.getLogger(__name__)

BEAM_OPTIONS_HELP = (
    "Beam pipeline options such as --runner, --direct_running_mode, --direct_num_workers, "
    "--project, --region, --temp_location, --setup_file, --job_endpoint or "
    "--environment_type are passed through to Beam (a typo in one of them fails like a "
    "typo in ours); see "
    "https://beam.apache.org/documentation/programming-guide/#configuring-pipeline-options "
    "and each runner's page under https://beam.apache.org/documentation/runners/.")
DEFAULT_PROGRESS_INTERVAL_S = 10.0
# Our loggers: the project's packages (the entry points log under `pipelines.*`).
OUR_LOGGERS = ("pipelines", "transforms", "__main__")


class UsageError(ValueError):
    """A user mistake (a bad flag or value, a missing file or column): reported in one
    line with exit status 2. A ValueError, the configuration errors' type by contract."""


# The errors about a file the user handed in that cannot be read (inputs, previous runs,
# statistics files, model folders, dumps, training data): each class sets
# `user_file_error = True` and its message names the file. They end in one line and exit
# status 2 (`run_main`), also when a worker raised them inside a running pipeline, where
# a runner may hand back only their text: so their names are listed here too (a test
# keeps the list complete). Layers below `io` cannot import a base class from here.
FILE_ERROR_NAMES = ("InputFileError", "PreviousRunError", "StatisticsFileError",
                    "ModelFolderError", "DumpReadError", "TrainingDataError",
                    "PrivateFolderError")
_FILE_ERROR_LINE = re.compile(r"\b(?:" + "|".join(FILE_ERROR_NAMES) + r"): (.+)$")
_WHILE_RUNNING = re.compile(r"(?: \[while running [^\]]*\])+")


def file_error_message(error: BaseException) -> str | None:
    """The message of a user-file error (see `FILE_ERROR_NAMES`) that `error` is, was
    caused by, or (a runner's error that carries a worker's traceback as text) names;
    None when there is none. Beam's "[while running 'step']" suffix is dropped."""
    seen = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if getattr(type(current), "user_file_error", False):
            return _WHILE_RUNNING.sub("", str(current)).strip()
        current = current.__cause__ or current.__context__
    found = None
    for line in str(error).replace("\\n", "\n").splitlines():
        match = _FILE_ERROR_LINE.search(line)
        if match:
            found = match.group(1)
    return None if found is None else _WHILE_RUNNING.sub("", found).strip().rstrip("'\"")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's and epilog's line breaks and adds the default to every
    flag whose help does not state it already: "(default: X)", "(default: off)" for a
    switch, "(default: none)" for an unset value."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (not action.option_strings or "default" in text.lower()
                or action.default is argparse.SUPPRESS):
            return text
        if action.default is False:
            return text + " (default: off)"
        if action.default is None:
            return text + " (default: none)"
        return text + " (default: %(default)s)"


class ArgumentParser(argparse.ArgumentParser):
    """An entry point's parser: no abbreviations (a prefix of a flag is a typo), help with
    defaults, and errors raised as `UsageError` (one line) instead of usage + exit."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        raise UsageError(message)

    def flags(self) -> list[str]:
        """Every option string of ours (help excluded)."""
        return [s for action in self._actions for s in action.option_strings
                if s.startswith("--") and not isinstance(action, argparse._HelpAction)]


# The characters Beam's file systems read as a pattern in a path (`FileSystems.match` and
# `delete`, through `FileSystem.translate_pattern`), as Python's `glob` does.
PATTERN_CHARACTERS = "[]*?"


def output_path(value: str) -> str:
    """The argparse `type` of every flag that names an output: `value` as it is, or
    refused when it holds a pattern character, so the command line fails in one line
    (exit status 2) before anything is written.

    A Beam run finds, publishes and deletes its files by matching patterns built on
    its output path, and a later command reads an output back by a glob: with `[`, `]`,
    `*` or `?` in the path, those patterns match other files or none (a run failed at
    its end with "Delete operation failed" and left its temporary files beside it).
    Input flags take globs and do not use this.

    Raises:
        argparse.ArgumentTypeError: the message names the value and the characters
            (argparse puts the flag before it).
    """
    found = [c for c in PATTERN_CHARACTERS if c in value]
    if found:
        raise argparse.ArgumentTypeError(
            f"{value!r} holds {', '.join(map(repr, found))}, which Beam's file systems "
            "and globs read as a pattern, so the run's own files could not be matched: an "
            "output path cannot hold [ ] * ?")
    return value


def add_runtime_arguments(group: Any, progress: bool = True) -> None:
    """`--progress_interval` (Beam pipelines) and `--verbose`, on a parser or group."""
    if progress:
        group.add_argument(
            "--progress_interval", type=float, default=DEFAULT_PROGRESS_INTERVAL_S,
            help="seconds between progress lines on a local runner (FnApiRunner/"
                 "DirectRunner, PortableRunner with LOOPBACK); 0 = none (default: "
                 "%(default)s). On Dataflow, follow the job's counters in its UI.")
    group.add_argument("--verbose", action="store_true",
                       help="show the traceback of an error, and Beam's own INFO logs")


# Modules whose runner options register only when they are imported.
_RUNNER_OPTION_MODULES = ("apache_beam.runners.dask.dask_runner",)


def _beam_parser(runner_options: bool = True):
    """Beam's parser with the flags of every `PipelineOptions` subclass, as
    `PipelineOptions.get_all_options` builds it (errors raised, not exited on).
    `runner_options`: also those of runners whose options register only when their
    module is imported (the DaskRunner's, whose import takes 0.4 s)."""
    from apache_beam.options import pipeline_options

    class _Parser(pipeline_options._BeamArgumentParser):
        def error(self, message: str):
            if message.startswith("ambiguous option: "):
                return  # as Beam's parser: unknown, reported as such below
            raise UsageError(message)

    # Runner options that live outside pipeline_options.py register when imported.
    for module in _RUNNER_OPTION_MODULES if runner_options else ():
        try:
            __import__(module)
        except ImportError:
            pass
    parser = _Parser(allow_abbrev=False)
    seen: dict[str, type] = {}
    stack = list(pipeline_options.PipelineOptions.__subclasses__())
    while stack:  # subclasses of subclasses as well
        cls = stack.pop()
        seen.setdefault(f"{cls.__module__}.{cls.__qualname__}", cls)
        stack.extend(cls.__subclasses__())
    for cls in seen.values():
        try:
            cls._add_argparse_args(parser)
        except argparse.ArgumentError:
            # A flag declared twice (a subclass re-declaring its parent's): known anyway.
            continue
    return parser


def _flag_names(parser: argparse.ArgumentParser) -> list[str]:
    return [s for action in parser._actions for s in action.option_strings
            if s.startswith("--")]


def unknown_flag_error(arg: str, known: Iterable[str]) -> UsageError:
    """The one-line error for an argument nobody knows, with the closest valid flag."""
    if not arg.startswith("-"):
        return UsageError(f"unexpected argument {arg!r} (every value goes with a flag, "
                          "e.g. --input FILE)")
    name = arg.split("=", 1)[0]
    close = difflib.get_close_matches(name, sorted(set(known)), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else "; see --help"
    return UsageError(f"unknown flag {name}{hint}")


def parse_flags(parser: ArgumentParser, argv: Sequence[str] | None,
                beam: bool = True) -> argparse.Namespace:
    """Parses `argv` with `parser`; with `beam`, the arguments it does not know must be
    Beam's or a runner's.

    Raises:
        UsageError: an unknown flag (named, with the closest valid one), a stray value, a
            bad value of one of our flags or of Beam's.
        SystemExit: --help (after printing it).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    # Unknown flags first: a typo in a required flag is reported as the typo it is.
    required = [action for action in parser._actions if action.required]
    for action in required:
        action.required = False
    try:
        args, rest = parser.parse_known_args(argv)
    finally:
        for action in required:
            action.required = True
    if rest and not beam:
        raise unknown_flag_error(rest[0], parser.flags())
    if rest:
        # the DaskRunner's options (all `--dask...`) are imported only when asked for
        beam_parser = _beam_parser(any(flag.startswith("--dask") for flag in rest))
        _, unknown = beam_parser.parse_known_args(rest)
        if unknown:
            beam_parser = _beam_parser()  # every known flag, for the error's suggestions
            raise unknown_flag_error(unknown[0], [*parser.flags(), *_flag_names(beam_parser)])
    missing = [action.option_strings[0] for action in required
               if getattr(args, action.dest) is None]
    if missing:
        raise UsageError(f"the following arguments are required: {', '.join(missing)}")
    return args


class _DropApitoolsWarning(logging.Filter):
    """Beam's GCP client warns "apitools not found" on import when the GCP extras are not
    installed; nothing of ours uses them."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("apitools not found")


class _DropUserFileErrorLogs(logging.Filter):
    """Beam logs a worker's exception with its traceback (`apache_beam.runners.common`,
    and the job service for worker processes) before the runner raises it; for a file
    the user handed in that cannot be read, the one line `run_main` prints says it all."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("apache_beam") or record.levelno < logging.ERROR:
            return True
        if record.exc_info and record.exc_info[1] is not None and \
                file_error_message(record.exc_info[1]) is not None:
            return False
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a record that cannot format is kept
            return True
        return not any(_FILE_ERROR_LINE.search(line)
                       for line in message.replace("\\n", "\n").splitlines())


def configure_logging(verbose: bool = False, level: int = logging.INFO) -> None:
    """Our loggers at `level` on stderr; Beam's at WARNING (INFO with `verbose`); Beam's
    error logs of a user-file error dropped (kept with `verbose`).

    `logging.basicConfig` without `force` does nothing once the root logger has a
    handler, which Beam's import gives it (its first warning installs one): `force=True`
    replaces that handler.
    """
    logging.basicConfig(level=logging.WARNING, force=True,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    root = logging.getLogger()
    for handler in root.handlers:
        handler.addFilter(_DropApitoolsWarning())
        if not verbose:
            handler.addFilter(_DropUserFileErrorLogs())
    for name in OUR_LOGGERS:
        logging.getLogger(name).setLevel(level)
    logging.getLogger("apache_beam").setLevel(logging.INFO if verbose else logging.WARNING)


def silence_apitools_warning() -> None:
    """Drops the "apitools not found" warning that importing Beam logs on the root
    logger (call before `import apache_beam`)."""
    logging.getLogger().addFilter(_DropApitoolsWarning())


class RunAlert(RuntimeError):
    """A run that completed and wrote its outputs, but found something a scheduler must
    hear about (`run_main`: one line on stderr, exit status `exit_status`)."""

    exit_status = 3


def run_main(prog: str, body: Callable[[list[str]], Any], argv: Sequence[str] | None, *,
             user_errors: tuple[type[BaseException], ...] = (UsageError,),
             setup_logging: Callable[[bool], None] | None = None) -> int:
    """Runs an entry point's `body(argv)` and returns its exit status.

    Args:
        prog: the program name errors start with.
        body: the entry point; its return value is ignored.
        argv: the arguments (None: sys.argv[1:]).
        user_errors: the exception types that are user mistakes: one line on stderr
            (`prog: error: message`), exit status 2; `--verbose` adds the traceback.
            So is a file the user handed in that cannot be read (`file_error_message`),
            wherever it was found, in a running pipeline too. Anything else
            propagates with its traceback (a fault, not a mistake).
        setup_logging: `(verbose) -> None`; default `configure_logging`.

    Returns:
        0, 2 for a user mistake (--help exits 0 through argparse's SystemExit), or a
        `RunAlert`'s exit status.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = "--verbose" in argv
    (setup_logging or configure_logging)(verbose)
    try:
        body(argv)
    except RunAlert as e:
        print(f"{prog}: {' '.join(str(e).split())}", file=sys.stderr)
        return e.exit_status
    except user_errors as e:
        if verbose:
            traceback.print_exc(file=sys.stderr)
        message = file_error_message(e) or str(e)
        print(f"{prog}: error: {' '.join(message.split()) or type(e).__name__}",
              file=sys.stderr)
        return 2
    except Exception as e:
        message = file_error_message(e)
        if message is None:
            raise  # a fault: its traceback
        if verbose:
            traceback.print_exc(file=sys.stderr)
        print(f"{prog}: error: {' '.join(message.split())}", file=sys.stderr)
        return 2
    return 0
