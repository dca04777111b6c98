"""`qa-data`: the data the demo, the examples, the tests and the benchmarks read, fetched
into a cache folder and checked (the registry: transforms/data/registry.json).

    qa-data list [NAME ...]                  # every entry: state in the cache, source
    qa-data fetch [NAME ...] [--mirror M]    # download, check SHA-256, skip what is there
    qa-data dir                              # print the cache folder

NAME is an entry (`squad-dev`), a set (`demo`, `tests`, `bench`) or `all` (the default).
The cache folder: `--data_dir`, else $QA_EVAL_DATA_DIR, else $XDG_CACHE_HOME/qa-eval or
~/.cache/qa-eval; it has the layout of the shared data folder, so every command that
takes the data folder takes it (`--data`, QA_EVAL_SHARED_DATA). `--mirror` (or
$QA_EVAL_DATA_MIRROR): a local folder or a base URL holding the files under the same
paths, used instead of the original hosts. `make data` runs `qa-data fetch`.

A failure (an HTTP error, an unreachable host, a truncated transfer, a wrong checksum, an
entry without a known source and no mirror) ends in one line naming the data set and the
address, with exit status 2; nothing that looks complete is left behind (a truncated
download stays as `<file>.part` and the next run resumes it).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from transforms.data import registry
from transforms.data.fetch import Fetcher, FetchError, check_kept
from transforms.io import cli

logger = logging.getLogger(__name__)

PROG = "qa-data"


def build_parser() -> cli.ArgumentParser:
    """The command line of `qa-data` (see the module docstring)."""
    parser = cli.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", metavar="{fetch,list,dir}")
    commands.required = True
    for name, text in (("fetch", "download the named data sets into the cache, checked"),
                       ("list", "list the registry's entries and their state in the cache"),
                       ("dir", "print the cache folder")):
        sub = commands.add_parser(name, help=text, description=text)
        sub.add_argument("--data_dir", default=None,
                         help=f"the cache folder (default: ${registry.DATA_DIR_ENV}, else "
                              "$XDG_CACHE_HOME/qa-eval or ~/.cache/qa-eval)")
        if name == "dir":
            continue
        sub.add_argument("names", nargs="*", metavar="NAME",
                         help="entries or sets (demo, tests, bench); default: all")
        if name == "fetch":
            sub.add_argument("--mirror", default=registry.default_mirror(),
                             help="a folder or base URL holding the files under their cache "
                                  f"paths, used instead of the original hosts (env "
                                  f"{registry.MIRROR_ENV}; default: the original hosts)")
            sub.add_argument("--timeout", type=float, default=60.0,
                             help="seconds to wait for a host (connection and each read)")
        cli.add_runtime_arguments(sub, progress=False)
    return parser


def _data_dir(args: argparse.Namespace) -> Path:
    return Path(args.data_dir).expanduser() if args.data_dir else registry.default_data_dir()


def fetch(names: list[str], data_dir: Path, mirror: str | None, timeout: float = 60.0,
          say=print) -> int:
    """Fetches the named entries into `data_dir`, one line each; returns how many were
    downloaded or copied.

    Raises:
        FetchError: the first data set that could not be fetched (one line).
        registry.RegistryError: an unknown name.
    """
    entries = registry.select(names)
    fetched = 0
    with Fetcher(data_dir, mirror, timeout) as fetcher:
        for entry in entries:
            outcome = fetcher.fetch_entry(entry)
            if outcome.status == "fetched":
                fetched += 1
                say(f"fetched  {entry.name:<22} {entry.path}  <- {outcome.source}")
            else:
                say(f"present  {entry.name:<22} {entry.path}")
    say(f"{len(entries)} data set(s) in {data_dir} ({fetched} fetched"
        + (f" from the mirror {mirror}" if mirror and fetched else "") + ")")
    return fetched


def list_entries(names: list[str], data_dir: Path, say=print) -> None:
    """One line per entry: its state in `data_dir`, size, path, source and licence."""
    say(f"cache: {data_dir}")
    for entry in registry.select(names):
        path = data_dir / entry.path
        if not path.is_file():
            state = "missing"
        elif check_kept(path, entry) is None:
            state = "ok"
        else:
            state = "WRONG"
        source = entry.url or "no known URL (a mirror is needed)"
        if entry.url and entry.transform:
            t = entry.transform
            source += (f" (member {t.member} of the {t.archive} archive)" if t.op == "extract"
                       else f" (served otherwise; the fetcher applies {t.op})")
        checked = "" if entry.upstream_checked else " [upstream unchecked]"
        say(f"{state:<8} {entry.name:<22} {entry.size:>10,}  {entry.path}\n"
            f"         {source}{checked}\n         licence: {entry.licence}")


def _main(argv: list[str]) -> None:
    args = cli.parse_flags(build_parser(), argv, beam=False)
    data_dir = _data_dir(args)
    if args.command == "dir":
        print(data_dir)
    elif args.command == "list":
        list_entries(args.names, data_dir)
    else:
        if args.timeout <= 0:
            raise cli.UsageError(f"--timeout must be > 0, got {args.timeout}")
        fetch(args.names, data_dir, args.mirror, args.timeout)


def main(argv: list[str] | None = None) -> int:
    """`qa-data`: exit status 0, or 2 with one line on stderr (a bad flag or name, a data
    set that could not be fetched)."""
    # One printed line per data set says it all; --verbose adds the library's INFO logs.
    return cli.run_main(PROG, _main, argv,
                        user_errors=(cli.UsageError, registry.RegistryError, FetchError),
                        setup_logging=lambda verbose: cli.configure_logging(
                            verbose, logging.INFO if verbose else logging.WARNING))


if __name__ == "__main__":
    sys.exit(main())
