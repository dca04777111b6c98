"""The coco-caption PTB tokenisation: Stanford PTBTokenizer + punctuation-token removal.

coco-caption (`pycocoevalcap.tokenizer.ptbtokenizer`) writes every caption as one line of a
file, runs `java edu.stanford.nlp.process.PTBTokenizer -preserveLines -lowerCase` (CoreNLP
3.4.1, shipped in the pycocoevalcap wheel) and drops the tokens in `PUNCTUATIONS` from each
output line. Every lexical metric (BLEU, ROUGE-L, CIDEr-D, METEOR) scores those strings.

Two backends give the same strings:

- `"python"` (default): `ptb_lexer.PTBLexer`, which runs the jar's own JFlex DFA (its
  tables are read from the installed jar) with the rule actions re-implemented in Python,
  so no JVM is started per row. It equals coco's output on every text of the real
  judgment files (tests/text/test_ptb.py) and on 60,000 fuzzed texts.
- `"jar"`: one JVM per call (the reference in tests, and the fallback for texts the
  Python path declines: texts with a capital sigma, whose lower-casing Java does with a
  word-boundary rule that differs from Python's, and scanner errors, of which none is
  known).

Context: a few CoreNLP rules look past the end of a line (whether a line-final "U.S." ends
a sentence depends on the first character of the next line), so in coco a caption's tokens
can depend on the caption written after it. Here every text is read as if the next line
started with a lower-case word ("x"), in both backends; none of the real judgment texts is
affected, and on fuzzed texts this gives the same strings as reading it last in the file.

Deviation, on purpose: coco replaces only "\\n" inside a caption, so a caption containing
another line break ("\\r", U+2028, ...) shifts every later caption by a line. Here each text
is tokenised on its own and any line break inside it is treated as a space.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import subprocess
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transforms.text.ptb_lexer import PTBLexer

logger = logging.getLogger(__name__)

# coco-caption's list, verbatim. "-LRB-" and friends are upper case while the tokenizer
# lower-cases, so "-lrb-" / "-rrb-" survive in coco's output; we keep that behaviour.
PUNCTUATIONS = frozenset(
    ["''", "'", "``", "`", "-LRB-", "-RRB-", "-LCB-", "-RCB-",
     ".", "?", "!", ",", ":", "-", "--", "...", ";"]
)
TOKENIZER_ID = "coco-ptb:corenlp-3.4.1:-preserveLines:-lowerCase:punct-removed"
BACKENDS = ("python", "jar")

# Characters the CoreNLP lexer treats as line breaks (its NEWLINE macro).
_LINE_BREAKS = re.compile("\r\n|[\r\n\u000b\u000c\u0085\u2028\u2029]")
_PYTHON_CACHE_SIZE = 1 << 16
_FINAL_SIGMA_CASE = "\u03a3"
# The line that follows every text: a lower-case word neither starts a sentence nor a tag.
_SENTINEL = "x"


class PTBTokenizerError(RuntimeError):
    """The Java tokenizer failed or returned output that does not line up with the input."""


def corenlp_jar() -> str:
    """Path of the CoreNLP 3.4.1 jar shipped inside pycocoevalcap."""
    import pycocoevalcap.tokenizer.ptbtokenizer as coco_ptb

    return os.path.join(
        os.path.dirname(os.path.abspath(coco_ptb.__file__)), coco_ptb.STANFORD_CORENLP_3_4_1_JAR
    )


def remove_punctuation(line: str) -> str:
    """coco's post-processing of one tokenizer output line."""
    return " ".join(w for w in line.rstrip().split(" ") if w not in PUNCTUATIONS)


def _one_line(text: str) -> str:
    return _LINE_BREAKS.sub(" ", text)


def jar_tokenize(texts: Sequence[str], java: str = "java", isolate: bool = True) -> list[str]:
    """Tokenises texts with the CoreNLP jar, one JVM for the whole call.

    Args:
        texts: raw texts.
        java: the java executable.
        isolate: follow every text by a sentinel line ("x"), so that each text is read in
            the same context whatever its neighbours are (see the module docstring); False
            is coco's file exactly (texts joined by newlines).

    Returns:
        One space-joined, punctuation-free, lower-cased token string per text.

    Raises:
        PTBTokenizerError: java failed.
    """
    if not texts:
        return []
    lines = [_one_line(t) for t in texts]
    if isolate:
        data = "".join(f"{line}\n{_SENTINEL}\n" for line in lines)
    else:
        data = "\n".join(lines)
    fd, path = tempfile.mkstemp(suffix=".txt", prefix="ptb-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8"))
        cmd = [java, "-cp", corenlp_jar(), "edu.stanford.nlp.process.PTBTokenizer",
               "-preserveLines", "-lowerCase", path]
        proc = subprocess.run(cmd, capture_output=True, check=False)
    finally:
        os.remove(path)
    if proc.returncode != 0:
        raise PTBTokenizerError(
            f"PTBTokenizer exited with {proc.returncode}: {proc.stderr.decode(errors='replace')}"
        )
    out = proc.stdout.decode("utf-8").split("\n")
    if isolate:
        if out[1: 2 * len(texts): 2] != [_SENTINEL] * len(texts):
            raise PTBTokenizerError("PTBTokenizer output does not line up with its input")
        out = out[0::2]
    # The tokenizer emits nothing for trailing empty lines; those texts are empty.
    out += [""] * (len(texts) - len(out))
    return [remove_punctuation(line) for line in out[: len(texts)]]


@functools.cache
def _lexer() -> PTBLexer | None:
    from transforms.text.ptb_lexer import PTBLexer

    try:
        return PTBLexer.from_jar(corenlp_jar())
    except ValueError as err:  # another CoreNLP build: its tables and actions may differ
        logger.warning("Python PTB lexer unavailable (%s); every text goes to the jar", err)
        return None


@functools.lru_cache(maxsize=_PYTHON_CACHE_SIZE)
def _python_tokenize(text: str) -> str | None:
    if _FINAL_SIGMA_CASE in text:
        return None  # Java's final-sigma rule (word-boundary based) differs from Python's
    lexer = _lexer()
    if lexer is None:
        return None
    tokens = lexer.tokenize_line(f"{_one_line(text)}\n{_SENTINEL}")
    if not tokens or tokens[-1] != _SENTINEL:
        return None
    tokens.pop()
    # PTBTokenizer lower-cases with toLowerCase(Locale.ENGLISH), which is str.lower() but
    # for the capital sigma (declined above).
    return " ".join(t for t in (w.lower() for w in tokens) if t not in PUNCTUATIONS)


# First characters of a following line that CoreNLP's lookahead can react to.
_NEXT_LINES = ("x", "X", "1", "", "<b>", "(", '"', "'", ".", "-", "$", "&amp;", "@", "#")


def context_dependent(text: str) -> bool:
    """Whether coco's tokens for `text` depend on the caption written after it.

    CoreNLP looks past the end of a line in a few rules (a line-final "no." stays one
    token before a line starting with a digit, and becomes "no" + "." otherwise). For
    such a text coco's output is not a function of the text alone; this tokenizer reads it
    as if a lower-case word followed. Among the real judgment texts two are such texts:
    "no." and "it was not mentioned so, no.".

    Returns:
        True when two following lines give different token strings; False also when the
        Python lexer is unavailable or declines the text.
    """
    lexer = _lexer()
    if lexer is None:
        return False
    line = _one_line(text)
    outs = set()
    for nxt in _NEXT_LINES:
        tokens = lexer.first_line(f"{line}\n{nxt}\n")
        if tokens is None:
            return False
        outs.add(" ".join(t for t in (w.lower() for w in tokens) if t not in PUNCTUATIONS))
    return len(outs) > 1


def tokenize(texts: Sequence[str], backend: str = "python", java: str = "java") -> list[str]:
    """Tokenises texts the coco-caption way.

    Args:
        texts: raw texts.
        backend: "python" (the jar's DFA run in Python, jar fallback for texts it declines)
            or "jar" (one JVM per call).
        java: the java executable for the jar backend and fallback.

    Returns:
        One token string per text (tokens joined by single spaces; "" when none).

    Raises:
        ValueError: an unknown backend.
        PTBTokenizerError: the jar was needed and failed.
    """
    if backend == "jar":
        return jar_tokenize(texts, java=java)
    if backend != "python":
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    out: list[str | None] = [_python_tokenize(t) for t in texts]
    missing = [i for i, s in enumerate(out) if s is None]
    if missing:
        logger.info("PTB: %d text(s) need the Java tokenizer", len(missing))
        for i, s in zip(missing, jar_tokenize([texts[i] for i in missing], java=java),
                        strict=True):
            out[i] = s
    return out  # type: ignore[return-value]


def clear_cache() -> None:
    """Forgets the Python tokenizer's memoised texts (benchmarks use it between batches)."""
    _python_tokenize.cache_clear()
