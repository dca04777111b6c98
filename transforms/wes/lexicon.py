"""The lexicon behind the dictionary-word filter: WordNet lemmas and the NLTK `words` list.

This module is the only place that locates NLTK data or touches `nltk.data.path`.

Resolution order, for the launcher and for every worker:
  1. Real NLTK data (`corpora/wordnet` and `corpora/words`) wherever NLTK already finds it
     (`NLTK_DATA`, `~/nltk_data`, `/usr/share/nltk_data`, the environment's `nltk_data`...).
  2. An `nltk_data` folder assembled from Debian's `wordnet-base` (WordNet 3.0 in
     `/usr/share/wordnet`, whose missing `lexnames` file is rebuilt from its man page) and
     the web2 list shipped in the `english-words` package (NLTK's `words` corpus is web2 too);
     lexicon_assembly.py builds it.
  3. `nltk.download` (needs the internet; the normal path on a Dataflow or Flink worker).
Anything else fails with a message that says what to install.

Run `python -m transforms.wes.lexicon --ensure` once to prepare the data (the Makefile does);
it also (re)writes the lexicon cache (`cache_path()`), from which later processes load
the decision data in a fraction of a second. A cache whose source files changed is
rebuilt by the next process that loads it; after installing other NLTK data, run
`--ensure` again. The cache is JSON, so a file planted where `QA_EVAL_NLTK_DATA` points
is at worst unreadable (then rebuilt), never code that runs; the pickle of earlier
versions (`LEGACY_CACHE_NAMES`) is never opened, and removed when the JSON cache is written.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import logging
import os
import sys
import warnings
from pathlib import Path

from transforms.wes.lexicon_assembly import (
    BUILD_MARKER,
    LexiconUnavailableError,
    build_from_debian,
)

logger = logging.getLogger(__name__)


def _default_build_dir() -> Path:
    # `<sys.prefix>/nltk_data` is on NLTK's default search path, so data built there is
    # found by any process of this environment without further configuration.
    return Path(sys.prefix) / "nltk_data"


def _nltk_has(resource: str) -> bool:
    import nltk

    try:
        nltk.data.find(resource)
    except LookupError:
        return False
    return True


def has_nltk_data() -> bool:
    """True when NLTK already finds both corpora on its search path."""
    return _nltk_has("corpora/wordnet") and _nltk_has("corpora/words")


# The decision data of `Lexicon`, as JSON (`load_lexicon_data`); bump with LexiconData.
CACHE_NAME = ".qa_eval_lexicon_cache_v2.json"
# Caches of earlier versions: pickles, never loaded (unpickling can run code).
LEGACY_CACHE_NAMES = (".qa_eval_lexicon_cache_v1.pickle",)


def _found_under(resource: str, folder: Path) -> bool:
    import nltk

    return Path(str(nltk.data.find(resource))).resolve().is_relative_to(folder.resolve())


@functools.lru_cache(maxsize=1)
def ensure_nltk_data() -> None:
    """Makes `corpora/wordnet` and `corpora/words` loadable by NLTK in this process.

    Raises:
        LexiconUnavailableError: with what to install, when no source works.
    """
    import nltk

    target = Path(os.environ.get("QA_EVAL_NLTK_DATA", _default_build_dir()))
    if str(target) not in nltk.data.path:
        nltk.data.path.append(str(target))
    complete = (target / "corpora" / BUILD_MARKER).exists()
    if has_nltk_data() and (complete or not _found_under("corpora/wordnet", target)):
        return
    errors = []
    try:
        build_from_debian(target)
    except (LexiconUnavailableError, OSError) as e:
        errors.append(str(e))
        for package in ("wordnet", "words"):
            if not nltk.download(package, download_dir=str(target), quiet=True):
                errors.append(f"nltk.download({package!r}) failed")
    if not has_nltk_data():
        raise LexiconUnavailableError(
            "no WordNet/words data for the dictionary-word filter: " + "; ".join(errors)
        )


@dataclasses.dataclass(frozen=True)
class LexiconData:
    """What the dictionary-word decision needs, read once from NLTK's corpora.

    Attributes:
        words: the `words` corpus, lower-cased.
        noun_lemmas: every form WordNet's index lists as a noun.
        noun_exceptions: WordNet's noun exception list (`noun.exc`): form -> lemmas.
        noun_substitutions: the detachment rules NLTK's `_morphy` applies to nouns.
        sources: (path, size, mtime_ns) of every file it was read from; a cache whose
            sources changed is rebuilt.
    """

    words: frozenset[str]
    noun_lemmas: frozenset[str]
    noun_exceptions: dict[str, tuple[str, ...]]
    noun_substitutions: tuple[tuple[str, str], ...]
    sources: tuple[tuple[str, int, int], ...]


def _stamps(pointer) -> list[tuple[str, int, int]]:
    """(path, size, mtime_ns) of a corpus root NLTK found: its zip, or its files."""
    zipped = getattr(pointer, "zipfile", None)
    paths = [Path(zipped.filename)] if zipped is not None else sorted(
        f for f in Path(pointer.path).iterdir() if f.is_file())
    return [_stamp(str(f)) for f in paths]


def _stamp(path: str) -> tuple[str, int, int]:
    st = os.stat(path)
    return path, st.st_size, st.st_mtime_ns


def _sources_unchanged(sources) -> bool:
    try:
        return all(_stamp(path) == (path, size, mtime) for path, size, mtime in sources)
    except OSError:
        return False


def read_lexicon_data() -> LexiconData:
    """Loads the data through NLTK (a few seconds: the import and WordNet's index)."""
    ensure_nltk_data()
    import nltk
    from nltk.corpus import words

    wordnet = nltk.data.find("corpora/wordnet")
    reader = _lemma_only_wordnet(wordnet)
    return LexiconData(
        words=frozenset(w.lower() for w in words.words()),
        noun_lemmas=frozenset(form for form, by_pos in reader._lemma_pos_offset_map.items()
                              if "n" in by_pos),
        noun_exceptions={form: tuple(lemmas)
                         for form, lemmas in reader._exception_map["n"].items()},
        noun_substitutions=tuple(map(tuple, reader.MORPHOLOGICAL_SUBSTITUTIONS["n"])),
        sources=tuple(_stamps(wordnet) + _stamps(nltk.data.find("corpora/words"))),
    )


def cache_path() -> Path:
    """Where the lexicon cache lives: next to the assembled NLTK data."""
    return Path(os.environ.get("QA_EVAL_NLTK_DATA", _default_build_dir())) / CACHE_NAME


def _to_json(data: LexiconData) -> dict:
    return {"format": CACHE_NAME, "words": sorted(data.words),
            "noun_lemmas": sorted(data.noun_lemmas),
            "noun_exceptions": {k: list(v) for k, v in data.noun_exceptions.items()},
            "noun_substitutions": [list(r) for r in data.noun_substitutions],
            "sources": [list(s) for s in data.sources]}


def _from_json(obj) -> LexiconData:
    """LexiconData from the cache's JSON (containers checked; JSON holds no code).

    Raises:
        ValueError: not a lexicon cache of this version.
    """
    if not isinstance(obj, dict) or obj.get("format") != CACHE_NAME:
        raise ValueError("not a lexicon cache of this version")
    if not all(isinstance(obj.get(k), list) for k in ("words", "noun_lemmas")):
        raise ValueError("malformed lexicon cache (words)")
    try:
        data = LexiconData(
            words=frozenset(obj["words"]), noun_lemmas=frozenset(obj["noun_lemmas"]),
            noun_exceptions={k: tuple(v) for k, v in obj["noun_exceptions"].items()},
            noun_substitutions=tuple((old, new) for old, new in obj["noun_substitutions"]),
            sources=tuple((path, size, mtime) for path, size, mtime in obj["sources"]))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"malformed lexicon cache ({type(e).__name__}: {e})") from e
    if not all(isinstance(path, str) for path, _, _ in data.sources):
        raise ValueError("malformed lexicon cache (sources)")
    return data


def load_lexicon_data(path: Path | None = None, refresh: bool = False) -> LexiconData:
    """The lexicon data from the cache when its sources are unchanged, else from NLTK
    (then written to the cache for the next process; a cache that cannot be written is
    only logged). The cache is JSON; a pickle cache of an earlier version beside it is
    never opened (it is deleted when the new cache is written)."""
    path = path or cache_path()
    if not refresh:
        try:
            with open(path, encoding="utf-8") as f:
                data = _from_json(json.load(f))
            if _sources_unchanged(data.sources):
                return data
            logger.info("lexicon cache %s is stale; rebuilding it", path)
        except FileNotFoundError:
            pass
        except (OSError, UnicodeDecodeError, ValueError) as e:  # truncated or foreign: rebuilt
            logger.warning("ignoring unreadable lexicon cache %s (%s)", path, e)
    data = read_lexicon_data()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(_to_json(data), f, ensure_ascii=False, separators=(",", ":"))
        os.replace(tmp, path)
        for name in LEGACY_CACHE_NAMES:
            legacy = path.with_name(name)
            if legacy.exists():
                legacy.unlink()
                logger.info("removed the old pickle lexicon cache %s", legacy)
    except OSError as e:
        logger.info("lexicon cache not written to %s (%s)", path, e)
    return data


class Lexicon:
    """Decides whether a string is a dictionary word (docs/design.md, Mining).

    A string is a dictionary word when it is one whitespace-free token and its WordNet
    lemma, lower-cased, is in the `words` corpus, lower-cased. The string is lower-cased
    before lemmatising, so that a sentence-initial capital ("Apples") does not hide the
    lemma from WordNet, whose index is lower-case (docs/decisions.md).

    The lemma is NLTK's `WordNetLemmatizer().lemmatize(word)` (noun), computed from
    `LexiconData` by the same steps as NLTK's `_morphy` (tests/wes/test_lexicon.py checks
    them equal on every word of the corpus and every exception form), so that a process
    loads a cache of the data instead of importing NLTK and reading WordNet's index.
    """

    def __init__(self, data: LexiconData | None = None) -> None:
        data = data or load_lexicon_data()
        self._words = data.words
        self._noun_lemmas = data.noun_lemmas
        self._exceptions = data.noun_exceptions
        self._substitutions = data.noun_substitutions
        self._single_token_is_word = functools.lru_cache(maxsize=1 << 18)(
            self._lemma_is_word)

    def noun_lemmas(self, form: str) -> list[str]:
        """NLTK's `_morphy(form, "n")`: the exception list's lemmas for a listed form,
        else one pass of the detachment rules; the form itself first; only forms WordNet
        has as nouns, each once."""
        if form in self._exceptions:
            forms = list(self._exceptions[form])
        else:
            forms = [form[: -len(old)] + new for old, new in self._substitutions
                     if form.endswith(old)]
        result: list[str] = []
        for candidate in [form, *forms]:
            if candidate in self._noun_lemmas and candidate not in result:
                result.append(candidate)
        return result

    def lemmatize(self, word: str) -> str:
        """WordNet's noun lemma, as `nltk.stem.WordNetLemmatizer().lemmatize(word)`."""
        lemmas = self.noun_lemmas(word)
        return min(lemmas, key=len) if lemmas else word

    @property
    def size(self) -> int:
        """Number of distinct lower-cased words in the `words` corpus."""
        return len(self._words)

    def is_dictionary_word(self, text: str) -> bool:
        """Whether `text` is a dictionary word (the class's rule). Only one-token texts
        reach the cache: most titles and link texts have several, and a cache of them
        would only churn."""
        if not text or len(text.split()) != 1:
            return False
        return self._single_token_is_word(text)

    def _lemma_is_word(self, text: str) -> bool:
        return self.lemmatize(text.lower()).lower() in self._words


def _lemma_only_wordnet(root):
    """NLTK's WordNet reader without the sense-key mapping it builds for the Open
    Multilingual WordNet at load (two passes over `index.sense`, most of its load time);
    lemmatisation never uses it."""
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    class LemmaOnlyWordNet(WordNetCorpusReader):
        def map_wn(self, version="wordnet"):
            return None

    with warnings.catch_warnings():
        # "multilingual functions are not available": intended, there is no OMW here.
        warnings.simplefilter("ignore", UserWarning)
        return LemmaOnlyWordNet(root, None)


@functools.lru_cache(maxsize=1)
def load_lexicon() -> Lexicon:
    """The process-wide lexicon (from the cache in well under a second; from NLTK's
    corpora in a few seconds the first time)."""
    return Lexicon()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--has-real-data", action="store_true",
                       help="exit 0 when NLTK already finds wordnet and words data")
    group.add_argument("--ensure", action="store_true",
                       help="find or assemble the data, (re)write the lexicon cache, check it loads")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.has_real_data:
        return 0 if has_nltk_data() else 1
    lexicon = Lexicon(load_lexicon_data(refresh=True))
    logger.info("lexicon ready: %d words; 'dogs' is a dictionary word: %s",
                lexicon.size, lexicon.is_dictionary_word("dogs"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
