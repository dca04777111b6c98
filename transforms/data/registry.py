"""The data registry: every file the demo, the examples, the tests and the benchmarks
read, with where it comes from and how to check it (`registry.json` beside this module).

An entry names one file of the data cache:

- `name` (what `qa-data fetch NAME` takes), `path` (relative to the cache; the layout of
  the shared data folder), `size` and `sha256` of the file as kept;
- `content_sha256` / `content_size` for a file kept gzip-compressed: those of its
  decompressed bytes, so that a copy compressed by another deflate implementation is
  recognised as the same data;
- `url`: the original public address, or null where none is known (`note` says why);
  `url_source` says where the address comes from, `checked_against` what the bytes were
  compared with here, `upstream_checked` whether the bytes at `url` were checked (false
  until a run with internet confirms them);
- `transform`: how the served form becomes the kept one (`gzip`, `gunzip`, `extract` of
  an archive member), with the served form's checksum where known;
- `recipe` for a file derived from another project's file, `licence`, `sets` (who reads
  it: demo, tests, bench).
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

DATA_DIR_ENV = "QA_EVAL_DATA_DIR"
MIRROR_ENV = "QA_EVAL_DATA_MIRROR"
TRANSFORM_OPS = {"gzip": (), "gunzip": (), "extract": ("archive", "member")}
ARCHIVES = ("zip", "tar", "tar.gz", "tar.bz2")
SETS = ("demo", "tests", "bench")


class RegistryError(ValueError):
    """A malformed registry entry or an unknown name (a user mistake when a name)."""


@dataclass(frozen=True)
class Transform:
    """How the served form of a file becomes the kept one."""

    op: str
    archive: str | None = None
    member: str | None = None
    source_sha256: str | None = None
    source_size: int | None = None


@dataclass(frozen=True)
class Entry:
    """One file of the data cache (see the module docstring for the fields)."""

    name: str
    path: str
    size: int
    sha256: str
    url: str | None
    licence: str
    upstream_checked: bool
    description: str = ""
    url_source: str = ""
    content_sha256: str | None = None
    content_size: int | None = None
    transform: Transform | None = None
    recipe: str | None = None
    checked_against: str | None = None
    note: str | None = None
    sets: tuple[str, ...] = field(default_factory=tuple)


def _check_sha256(value: object, where: str) -> None:
    if not (isinstance(value, str) and len(value) == 64
            and all(c in "0123456789abcdef" for c in value)):
        raise RegistryError(f"{where}: not a lower-case hex SHA-256: {value!r}")


def entry_from_dict(raw: dict) -> Entry:
    """An `Entry` from its JSON object, validated.

    Raises:
        RegistryError: a missing field, a bad checksum, path or transformation.
    """
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise RegistryError(f"registry entry without a name: {raw!r}")
    for key in ("path", "size", "sha256", "licence", "upstream_checked"):
        if key not in raw:
            raise RegistryError(f"registry entry {name}: no {key!r}")
    path = raw["path"]
    if Path(path).is_absolute() or ".." in Path(path).parts or "\\" in path:
        raise RegistryError(f"registry entry {name}: path must be relative: {path!r}")
    _check_sha256(raw["sha256"], f"registry entry {name}")
    if raw.get("content_sha256") is not None:
        _check_sha256(raw["content_sha256"], f"registry entry {name} content")
    url = raw.get("url")
    if url is None and not raw.get("note"):
        raise RegistryError(f"registry entry {name}: no url and no note saying why")
    transform = None
    if raw.get("transform"):
        t = dict(raw["transform"])
        op = t.get("op")
        if op not in TRANSFORM_OPS:
            raise RegistryError(f"registry entry {name}: unknown transform {op!r}; "
                                f"known: {', '.join(TRANSFORM_OPS)}")
        missing = [k for k in TRANSFORM_OPS[op] if not t.get(k)]
        if missing:
            raise RegistryError(f"registry entry {name}: transform {op} needs {missing}")
        if op == "extract" and t["archive"] not in ARCHIVES:
            raise RegistryError(f"registry entry {name}: archive {t['archive']!r} is not "
                                f"one of {', '.join(ARCHIVES)}")
        if t.get("source_sha256") is not None:
            _check_sha256(t["source_sha256"], f"registry entry {name} source")
        transform = Transform(**t)
    sets = tuple(raw.get("sets", ()))
    unknown = [s for s in sets if s not in SETS]
    if unknown:
        raise RegistryError(f"registry entry {name}: unknown sets {unknown}")
    return Entry(name=name, path=path, size=int(raw["size"]), sha256=raw["sha256"], url=url,
                 licence=raw["licence"], upstream_checked=bool(raw["upstream_checked"]),
                 description=raw.get("description", ""), url_source=raw.get("url_source", ""),
                 content_sha256=raw.get("content_sha256"),
                 content_size=raw.get("content_size"), transform=transform,
                 recipe=raw.get("recipe"), checked_against=raw.get("checked_against"),
                 note=raw.get("note"), sets=sets)


def parse_registry(document: dict) -> dict[str, Entry]:
    """name -> Entry, in the document's order.

    Raises:
        RegistryError: a malformed entry, or two entries with one name or one path.
    """
    entries: dict[str, Entry] = {}
    paths: set[str] = set()
    for raw in document.get("entries", []):
        entry = entry_from_dict(raw)
        if entry.name in entries or entry.path in paths:
            raise RegistryError(f"registry entry {entry.name}: name or path listed twice")
        entries[entry.name] = entry
        paths.add(entry.path)
    return entries


@functools.lru_cache(maxsize=1)
def load_registry() -> dict[str, Entry]:
    """The packaged registry (`transforms/data/registry.json`)."""
    text = resources.files(__package__).joinpath("registry.json").read_text(encoding="utf-8")
    return parse_registry(json.loads(text))


def select(names: list[str] | tuple[str, ...],
           registry: dict[str, Entry] | None = None) -> list[Entry]:
    """The entries that `names` name: an entry's name, a set (`demo`, `tests`, `bench`)
    or `all`; every entry when `names` is empty. Registry order, no repeats.

    Raises:
        RegistryError: a name that is neither (the message lists the known ones).
    """
    registry = load_registry() if registry is None else registry
    if not names or "all" in names:
        return list(registry.values())
    wanted: set[str] = set()
    for name in names:
        if name in registry:
            wanted.add(name)
        elif name in SETS:
            wanted.update(e.name for e in registry.values() if name in e.sets)
        else:
            raise RegistryError(f"unknown data set {name!r}; known: {', '.join(registry)}, "
                                f"or a set: {', '.join(SETS)}, all")
    return [e for e in registry.values() if e.name in wanted]


def default_data_dir(environ: dict[str, str] | None = None) -> Path:
    """The cache folder: $QA_EVAL_DATA_DIR, else $XDG_CACHE_HOME/qa-eval, else
    ~/.cache/qa-eval."""
    environ = os.environ if environ is None else environ
    if environ.get(DATA_DIR_ENV):
        return Path(environ[DATA_DIR_ENV]).expanduser()
    cache = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "qa-eval"


def default_mirror(environ: dict[str, str] | None = None) -> str | None:
    """$QA_EVAL_DATA_MIRROR, or None (the original hosts)."""
    environ = os.environ if environ is None else environ
    return environ.get(MIRROR_ENV) or None
