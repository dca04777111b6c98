"""When a candidate negative is in fact a synonym of its title, and the token F1 that ranks
lexical neighbours. Pure functions, Beam-free.

A candidate text (with the cluster it names, its source) is a synonym of a title, and is
never emitted as a negative, when (the first rule that applies is its counted reason):

- `own_link_text`: it is one of the title's own link texts (dictionary-filtered ones
  included: they link to the title all the same);
- `same_cluster`: its source is the title itself;
- `redirect`: it is, as a title, a redirect to the title or the title's own redirect
  target, or its source redirects to the title (or the title to its source);
- `normalised_equal`: after normalisation (`normalize_text`) it equals the title, one of
  the title's link texts or one of its redirects;
- `empty_after_normalisation`: nothing is left of it after normalisation (punctuation or
  articles only): no name at all.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import string
from collections.abc import Iterable

from transforms.wiki.links import normalize_title

SYNONYM_REASONS = ("own_link_text", "same_cluster", "redirect", "normalised_equal",
                   "empty_after_normalisation")

_ARTICLES = re.compile(r"\b(a|an|the)\b")
# deletes ASCII punctuation (`str.translate`: the SQuAD script's per-character filter,
# in C)
_NO_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_text(text: str) -> str:
    """Lower case, punctuation and the articles a/an/the removed, whitespace collapsed
    (the SQuAD answer normalisation)."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_NO_PUNCTUATION)).split())


def tokens(text: str) -> list[str]:
    """The tokens of `normalize_text(text)`."""
    return normalize_text(text).split()


def token_f1(a: str, b: str) -> float:
    """Token-level F1 of two texts (SQuAD's: bags of normalised tokens); 0 when either
    has no token."""
    return bag_f1(token_bag(a), token_bag(b))


def token_bag(text: str) -> tuple[frozenset, int]:
    """The bag of `tokens(text)` and its size: `bag_f1`'s input, computed once per text.

    The bag is a set in which a token's k-th repeat (k >= 1) is the pair (token, k), so
    the size of two bags' intersection is the multiset overlap SQuAD's F1 counts."""
    words = tokens(text)
    repeats: dict[str, int] = {}
    bag = []
    for word in words:
        k = repeats.get(word, 0)
        repeats[word] = k + 1
        bag.append((word, k) if k else word)
    return frozenset(bag), len(words)


def f1_of(common: int, a_size: int, b_size: int) -> float:
    """Token F1 from the overlap of two bags and their sizes."""
    if not common:
        return 0.0
    precision, recall = common / a_size, common / b_size
    return 2 * precision * recall / (precision + recall)


def bag_f1(a: tuple[frozenset, int], b: tuple[frozenset, int]) -> float:
    """`token_f1` of two `token_bag`s."""
    return f1_of(len(a[0] & b[0]), a[1], b[1])


@dataclasses.dataclass(frozen=True)
class TitleSynonyms:
    """What a title's synonyms are: its link texts and its redirects.

    Attributes:
        title: the title.
        texts: every link text of its cluster (dictionary-filtered ones too).
        redirects_in: titles of the redirect pages that point to it.
        redirect_out: its own redirect target, when the title is itself a redirect page.
    """

    title: str
    texts: frozenset[str]
    redirects_in: frozenset[str] = frozenset()
    redirect_out: str | None = None

    @classmethod
    def build(cls, title: str, texts: Iterable[str], redirects_in: Iterable[str] = (),
              redirect_out: Iterable[str] = ()) -> TitleSynonyms:
        out = sorted(redirect_out)
        return cls(title, frozenset(texts), frozenset(redirects_in), out[0] if out else None)

    @functools.cached_property
    def redirects(self) -> frozenset[str]:
        """The redirect titles on either side of the title."""
        return self.redirects_in | ({self.redirect_out} if self.redirect_out else set())

    def normalised(self) -> frozenset[str]:
        """The normalised forms a non-synonym must differ from."""
        return frozenset(normalize_text(t) for t in (self.title, *self.texts, *self.redirects))


@functools.lru_cache(maxsize=1 << 16)
def _forms(text: str) -> tuple[str, str]:
    """A candidate text as a title and normalised: the texts of one corpus's candidates
    recur from title to title (on the 300 MB benchmark dump 110,000 checks name 24,000
    texts)."""
    return normalize_title(text), normalize_text(text)


def synonym_reason(synonyms: TitleSynonyms, text: str, source: str,
                   normalised: frozenset[str] | None = None) -> str | None:
    """Why `text` (naming the cluster of `source`) is a synonym of `synonyms.title`, by the
    module's rules, or None when it may be a negative.

    Args:
        synonyms: the title's link texts and redirects.
        text: the candidate text.
        source: the title of the cluster the text names.
        normalised: `synonyms.normalised()`, when the caller has it already.
    """
    if text in synonyms.texts:
        return "own_link_text"
    if source == synonyms.title:
        return "same_cluster"
    redirects = synonyms.redirects
    if source in redirects:
        return "redirect"
    as_title, norm = _forms(text)
    if as_title in redirects:
        return "redirect"
    if not norm:
        return "empty_after_normalisation"
    if norm in (synonyms.normalised() if normalised is None else normalised):
        return "normalised_equal"
    return None
