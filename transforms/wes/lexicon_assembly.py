"""Assembly of NLTK's `wordnet` and `words` corpora from Debian packages. No NLTK needed.

`build_from_debian` copies WordNet 3.0 from Debian's `wordnet-base` (`/usr/share/wordnet`)
into an `nltk_data` folder, adding the two files that package lacks and NLTK reads:
`lexnames`, rebuilt from its man page, and `index.sense`, rebuilt from the `data.*` and
`index.*` files. The `words` corpus is the web2 list of the `english-words` package
(NLTK's `words` corpus is web2 too). `BUILD_MARKER`, written last, marks a complete build.
lexicon.py decides when to build (the second source of its resolution order).
"""

from __future__ import annotations

import gzip
import logging
import re
import shutil
from pathlib import Path

logger = logging.getLogger(__name__)

DEBIAN_WORDNET_DIR = Path("/usr/share/wordnet")
DEBIAN_LEXNAMES_MAN = Path("/usr/share/man/man5/lexnames.5WN.gz")
# WordNet's syntactic category numbers, by the prefix of a lexicographer file name.
_LEX_CATEGORY = {"noun": 1, "verb": 2, "adj": 3, "adv": 4}
_LEXNAME_ROW = re.compile(r"^(\d\d)\t((?:adj|adv|noun|verb)\.\w+) *\t")
# Written last by build_from_debian; bump it when the assembled layout changes so that
# older, incomplete builds are rebuilt instead of trusted.
BUILD_MARKER = ".qa_eval_lexicon_v2"
_SS_TYPE_NUMBER = {"n": 1, "v": 2, "a": 3, "r": 4, "s": 5}
_ADJ_MARKER = re.compile(r"\((?:a|p|ip)\)$")


class LexiconUnavailableError(RuntimeError):
    """No WordNet or `words` data could be found, assembled or downloaded."""


def lexnames_from_man_page(man_page: Path = DEBIAN_LEXNAMES_MAN) -> str:
    """Rebuilds WordNet's `lexnames` file (`NN<TAB>name<TAB>category`) from `lexnames.5WN`.

    Raises:
        LexiconUnavailableError: the man page lacks the 45 rows WordNet 3.0 has.
    """
    opener = gzip.open if man_page.suffix == ".gz" else open
    with opener(man_page, "rt", encoding="utf-8", errors="replace") as f:
        rows = [m.groups() for m in map(_LEXNAME_ROW.match, f) if m]
    numbers = [int(n) for n, _ in rows]
    if numbers != list(range(45)):
        raise LexiconUnavailableError(
            f"{man_page}: expected lexicographer files 00..44, found {numbers}"
        )
    return "".join(f"{n}\t{name}\t{_LEX_CATEGORY[name.split('.')[0]]}\n" for n, name in rows)


def _synset_words(line: str) -> tuple[str, int, str, list[tuple[str, int]], list[str]]:
    """(offset, lex_filenum, ss_type, [(word, lex_id)], pointer fields) of a data.* line."""
    f = line.split()
    offset, lex_filenum, ss_type, w_cnt = f[0], int(f[1]), f[2], int(f[3], 16)
    words = [(_ADJ_MARKER.sub("", f[4 + 2 * i]).lower(), int(f[5 + 2 * i], 16))
             for i in range(w_cnt)]
    p_at = 4 + 2 * w_cnt
    pointers = f[p_at + 1: p_at + 1 + 4 * int(f[p_at])]
    return offset, lex_filenum, ss_type, words, pointers


def index_sense_from_data(wordnet_dir: Path) -> str:
    """Rebuilds WordNet's `index.sense` (`sense_key offset sense_number tag_cnt`).

    Debian's wordnet-base lacks the file and nltk >= 3.9 reads it when WordNet loads.
    Sense keys follow senseidx(5WN): `lemma%ss_type:lex_filenum:lex_id:head_word:head_id`,
    the head being the first word of a satellite adjective's head synset.
    """
    synsets: dict[tuple[str, str], tuple[int, str, list[tuple[str, int]], list[str]]] = {}
    for pos in ("noun", "verb", "adj", "adv"):
        with open(wordnet_dir / f"data.{pos}", encoding="utf-8") as f:
            for line in f:
                if line.startswith("  "):
                    continue
                offset, lex_filenum, ss_type, words, pointers = _synset_words(line)
                synsets[(offset, pos)] = (lex_filenum, ss_type, words, pointers)
    sense_numbers: dict[tuple[str, str, str], int] = {}
    for pos in ("noun", "verb", "adj", "adv"):
        with open(wordnet_dir / f"index.{pos}", encoding="utf-8") as f:
            for line in f:
                if line.startswith("  "):
                    continue
                fields = line.split()
                synset_cnt = int(fields[2])
                for number, offset in enumerate(fields[-synset_cnt:], start=1):
                    sense_numbers[(fields[0], offset, pos)] = number
    tag_counts: dict[str, str] = {}
    if (wordnet_dir / "cntlist.rev").exists():
        with open(wordnet_dir / "cntlist.rev", encoding="utf-8") as f:
            for line in f:
                key, _, count = line.split()
                tag_counts[key] = count
    rows = []
    for (offset, pos), (lex_filenum, ss_type, words, pointers) in synsets.items():
        head = ""
        if ss_type == "s":
            for i in range(0, len(pointers), 4):
                if pointers[i] == "&":
                    head_word, head_id = synsets[(pointers[i + 1], "adj")][2][0]
                    head = f"{head_word}:{head_id:02d}"
                    break
        for word, lex_id in words:
            key = f"{word}%{_SS_TYPE_NUMBER[ss_type]}:{lex_filenum:02d}:{lex_id:02d}:{head or ':'}"
            number = sense_numbers.get((word, offset, pos), 0)
            rows.append(f"{key} {offset} {number} {tag_counts.get(key, 0)}\n")
    return "".join(sorted(rows))


def build_from_debian(target: Path, wordnet_dir: Path = DEBIAN_WORDNET_DIR) -> Path:
    """Assembles `target/corpora/{wordnet,words}` from Debian's WordNet and the web2 list.

    Files are copied, not linked: NLTK refuses symlinked corpus roots.

    Returns:
        `target`.
    Raises:
        LexiconUnavailableError: `wordnet_dir` or the `english-words` package is missing.
    """
    if not (wordnet_dir / "index.noun").exists():
        raise LexiconUnavailableError(
            f"{wordnet_dir} has no WordNet 3.0 database; install Debian's wordnet-base "
            "(apt-get install --no-install-recommends wordnet-base) or real NLTK data "
            "(python -m nltk.downloader wordnet words)"
        )
    try:
        import english_words
    except ImportError as e:
        raise LexiconUnavailableError("the english-words package is not installed") from e

    wordnet_out = target / "corpora" / "wordnet"
    words_out = target / "corpora" / "words"
    tmp = target / "corpora" / ".building"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "wordnet").mkdir(parents=True)
    (tmp / "words").mkdir()
    for f in wordnet_dir.iterdir():
        if f.is_file():
            shutil.copyfile(f, tmp / "wordnet" / f.name)
    (tmp / "wordnet" / "lexnames").write_text(lexnames_from_man_page(), encoding="utf-8")
    if not (tmp / "wordnet" / "index.sense").exists():
        (tmp / "wordnet" / "index.sense").write_text(
            index_sense_from_data(wordnet_dir), encoding="utf-8")
    (tmp / "wordnet" / "LICENSE").write_text("WordNet 3.0 license: see wordnet-base.\n")
    web2 = sorted(english_words.get_english_words_set(["web2"]))
    (tmp / "words" / "en").write_text("\n".join(web2) + "\n", encoding="utf-8")
    (tmp / "words" / "README").write_text("web2 word list (english-words package).\n")
    for built, final in ((tmp / "wordnet", wordnet_out), (tmp / "words", words_out)):
        shutil.rmtree(final, ignore_errors=True)
        built.rename(final)
    tmp.rmdir()
    (target / "corpora" / BUILD_MARKER).write_text("wordnet-base + english-words web2\n")
    logger.info("assembled NLTK wordnet + words data in %s", target)
    return target
