"""The file systems and runners a command line needs, checked at launch.

Beam finds a path's file system by its scheme (`gs://`, `s3://`, ...) among the file
system classes it could import, and a runner by name; a missing client library shows up
late, as a traceback from the first file operation (taking the output's lock) or from the
runner. `check_launch` looks at every path flag of a command line and at its runner
before anything is read or written, and ends a missing dependency in one line
(`UsageError`: exit status 2) that names the extra to install:

    qa-score: error: --output gs://bucket/run: Beam has no file system for gs:// here;
    pip install 'qa-eval-beam[gcp]'

For a path on S3 it corrects Beam's S3 client in the launcher and returns the flag that
does it in the workers (`--beam_plugins transforms.io.s3_fixes`, s3_fixes.py). It also
hands the run's pipeline options to Beam's `FileSystems` (`use_options`), so
that what the launcher itself reads and writes before the pipeline exists (the lock, the
inputs' sizes, a previous run) goes through the same endpoint and credentials as the
workers (`--s3_endpoint_url`, `--s3_access_key_id`, ...); Beam sets them only when a
pipeline is built.

docs/install.md has the table of which extra each engine and store needs.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping, Sequence

import apache_beam as beam
from apache_beam.io.filesystem import FileSystem
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import (
    GoogleCloudOptions,
    PipelineOptions,
    StandardOptions,
)

from transforms.io.cli import UsageError

PACKAGE = "qa-eval-beam"

# scheme -> (what to install, the modules Beam's file system for it needs). An extra of
# this project where it has one (Beam's own extra, pinned like the project's Beam).
SCHEME_NEEDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "gs": (f"'{PACKAGE}[gcp]'", ("apache_beam.io.gcp.gcsfilesystem", "google.cloud.storage")),
    "s3": (f"'{PACKAGE}[aws]'", ("apache_beam.io.aws.s3filesystem", "boto3")),
    "hdfs": ("hdfs", ("apache_beam.io.hadoopfilesystem", "hdfs")),
    "azfs": ("'apache-beam[azure]'", ("apache_beam.io.azure.blobstoragefilesystem",
                                      "azure.storage.blob")),
}
# runner (lower case, without "runner") -> (what to install, the modules it needs)
RUNNER_NEEDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "dataflow": (f"'{PACKAGE}[gcp]'", ("apache_beam.runners.dataflow.dataflow_runner",
                                       "apache_beam.runners.dataflow.internal.apiclient")),
    "dask": (f"'{PACKAGE}[dask]'", ("dask", "distributed")),
}
# The module that corrects Beam's S3 client, imported by workers as a Beam plugin.
S3_FIXES = "transforms.io.s3_fixes"
# Beam's own flags that name a path (a job's temporary and staging files).
BEAM_PATH_FLAGS = ("temp_location", "staging_location", "template_location")


def importable(modules: Iterable[str]) -> bool:
    """Whether every one of `modules` imports (a library that imports but fails inside
    counts as missing too: Beam's file system would fail the same way)."""
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - ImportError, or a broken install of the library
            return False
    return True


def _registered(scheme: str) -> bool:
    return any(fs.scheme() == scheme for fs in FileSystem.get_all_subclasses())


def path_problem(path: str) -> str | None:
    """Why Beam cannot reach `path` from here (its scheme's file system or its library is
    missing), or None: a local path, or a scheme Beam can use."""
    scheme = FileSystems.get_scheme(path)
    if scheme is None or scheme == "file":
        return None
    install, modules = SCHEME_NEEDS.get(scheme, (None, ()))
    if _registered(scheme) and importable(modules):
        return None
    if install is None:
        known = sorted({fs.scheme() for fs in FileSystem.get_all_subclasses()
                        if fs.scheme() not in (None, "file")
                        and importable(SCHEME_NEEDS.get(fs.scheme(), ("", ()))[1])})
        return (f"Beam has no file system for {scheme}:// (file systems here: "
                f"{', '.join(f'{s}://' for s in known) or 'local files only'})")
    return f"Beam has no file system for {scheme}:// here; pip install {install}"


def runner_problem(runner: str | None) -> str | None:
    """Why the runner `runner` (a name as `--runner` takes it) cannot start here, or
    None."""
    if not runner:
        return None
    name = runner.rsplit(".", 1)[-1].lower()
    name = name[:-len("runner")] if name.endswith("runner") else name
    name = name[len("test"):] if name.startswith("test") else name
    install, modules = RUNNER_NEEDS.get(name, (None, ()))
    if install is None or importable(modules):
        return None
    return f"Beam's {runner} needs libraries that are not installed here; pip install {install}"


def split_paths(value: str | None, comma_separated: bool = False) -> list[str]:
    if not value:
        return []
    parts = value.split(",") if comma_separated else [value]
    return [p.strip() for p in parts if p.strip()]


def check_paths(flags: Mapping[str, str | None], comma_separated: Sequence[str] = ()
                ) -> None:
    """Raises `UsageError` naming the first flag whose path Beam cannot reach here.

    Args:
        flags: flag (as written, e.g. "--output") -> its value (None: not given).
        comma_separated: the flags whose value is a comma-separated list of paths.
    """
    for flag, value in flags.items():
        for path in split_paths(value, flag in comma_separated):
            problem = path_problem(path)
            if problem:
                raise UsageError(f"{flag} {path}: {problem}")


def beam_path_flags(options: PipelineOptions) -> dict[str, str | None]:
    """Beam's path flags given in `options` (--temp_location, ...)."""
    cloud = options.view_as(GoogleCloudOptions)
    return {f"--{name}": getattr(cloud, name, None) for name in BEAM_PATH_FLAGS}


def use_options(options: PipelineOptions) -> None:
    """Hands the run's options to Beam's `FileSystems` (see the module docstring)."""
    FileSystems.set_options(options)


def check_launch(flags: Mapping[str, str | None], argv: Sequence[str] | None = None,
                 comma_separated: Sequence[str] = ()) -> list[str]:
    """The launch check of a Beam command line: the runner (`--runner` in `argv`), then
    every path of `flags` and of Beam's path flags; then the options are handed to
    `FileSystems`.

    Args:
        flags: the command's path flags -> values.
        argv: the whole command line (Beam's flags among it); None: no Beam flags.
        comma_separated: flags whose value is a comma-separated list of paths or globs.

    Returns:
        Beam flags to add to the run's command line: `--beam_plugins` naming the S3
        corrections when a path is on S3 (nothing otherwise).

    Raises:
        UsageError: one line naming the flag and what to install.
    """
    options = PipelineOptions(list(argv)) if argv is not None else None
    if options is not None:
        runner = options.view_as(StandardOptions).runner
        problem = runner_problem(runner)
        if problem:
            raise UsageError(f"--runner {runner}: {problem}")
        flags = {**flags, **beam_path_flags(options)}
    check_paths(flags, comma_separated)
    extra = []
    if any(FileSystems.get_scheme(path) == "s3" for flag, value in flags.items()
           for path in split_paths(value, flag in comma_separated)):
        importlib.import_module(S3_FIXES)  # corrects the client here, as in the workers
        extra = [f"--beam_plugins={S3_FIXES}"]
    if options is not None:
        use_options(PipelineOptions([*argv, *extra]))
    return extra


def check_local_paths(flags: Mapping[str, str | None], what: str) -> None:
    """Refuses a path with a scheme (`gs://`, `s3://`, ...) for a command that reads and
    writes local files only (`what` names it, e.g. "the trainers")."""
    for flag, value in flags.items():
        for path in split_paths(value):
            scheme = FileSystems.get_scheme(path)
            if scheme not in (None, "file"):
                raise UsageError(
                    f"{flag} {path}: {what} read and write local files only; copy it "
                    f"from {scheme}:// first (or mount the bucket)")


def new_pipeline(options: PipelineOptions) -> beam.Pipeline:
    """`beam.Pipeline(options=options)`, with the runner's option validation (Dataflow's:
    project id, region, temp and staging locations) failing in one line (`UsageError`)
    instead of a traceback."""
    try:
        return beam.Pipeline(options=options)
    except ValueError as e:
        if "validations errors" not in str(e):
            raise
        raise UsageError(" ".join(str(e).replace("validations errors", "validation errors")
                                  .split())) from e
