"""Word pieces word by word (`WordPieces`): exactly the Rust tokenizer's ids on real
answers, gold aliases and questions and on seeded texts of the characters that choke a
split (controls, odd spaces, combining marks, accents, added tokens, CJK, emoji, words
past WordPiece's length); what each character is learnt to be; the bounded memo; and no
`WordPieces` for tokenizers of other components."""

from __future__ import annotations

import copy
import random

import pytest
from tokenizers import AddedToken, normalizers

from tests.conftest import SHARED_DATA
from transforms.models import loading, word_pieces
from transforms.models.encoding import SegmentEncoder
from transforms.models.word_pieces import WordPieces, backend_ids
from transforms.training import evouna

EVOUNA = SHARED_DATA / "judgments" / "evouna" / "TQ.json"
# characters a split can get wrong, beside printable ASCII
_ODD = ["\t", "\n", "\r", "\x0b", "\x0c", "\x00", "\x1f", "\x7f", "\x85", "\xa0", "\u2009",
        "\u3000", "\u200b", "\ufeff", "\ufffd", "\u0301", "é", "É", "ß", "İ", "Σ", "ς",
        "ﬁ", "東", "京", "😀", "’", "“", "”", "–", "—", "…", "Ａ", "½", "²", "£", "·", "¡"]
_WORDS = ["[SEP]", "[sep]", "[MASK]", "[UNK]", "[CLS]x", "##ing", "x" * 150, "Chipmunks",
          "1919–1972", "a.k.a.", "U.S.", "don't", "naïve", "東京", "e\u0301"]


@pytest.fixture(scope="module")
def tokenizer():
    return loading.load_tokenizer(loading.ModelSpec(loading.packaged_model_path()))


@pytest.fixture(scope="module")
def texts() -> list[str]:
    rows = evouna.judged_answers(evouna.read_questions(str(EVOUNA)))[:3000]
    golds = dict.fromkeys(g for r in rows for g in r.references)
    return [*(r.prediction for r in rows), *golds, *dict.fromkeys(r.question for r in rows)]


def _odd_texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    plain = "abcXYZ019 .,;!?'\"()[]#$-_/"
    out = []
    for _ in range(n):
        parts = [rng.choice(_WORDS if r < 0.05 else _ODD if r < 0.1 else plain)
                 for r in (rng.random() for _ in range(rng.randint(0, 30)))]
        out.append("".join(parts))
    return out


def _ids(words: WordPieces, texts: list[str]) -> list[list[int]]:
    """`WordPieces.ids` as lists, as `backend_ids` gives the tokenizer's own."""
    return [x.tolist() for x in words.ids(texts)]


def test_ids_equal_the_tokenizers_on_real_texts(tokenizer, texts):
    words = WordPieces.of(tokenizer)
    assert words is not None
    expected = backend_ids(tokenizer.backend_tokenizer, texts)
    assert _ids(words, texts) == expected
    assert _ids(words, texts) == expected  # from the memo
    split = sum(words.split(t) is not None for t in texts)
    assert split > 0.95 * len(texts)  # nearly all split in Python, not sent whole


def test_ids_equal_the_tokenizers_on_odd_characters(tokenizer):
    words = WordPieces.of(tokenizer)
    odd = _odd_texts(4000)
    got = words.ids(odd)
    expected = backend_ids(tokenizer.backend_tokenizer, odd)
    for text, mine, own in zip(odd, got, expected):
        assert mine.tolist() == own, repr(text)
    assert sum(words.split(t) is not None for t in odd) > 1000  # the split path is tested


def test_characters_are_learnt_from_the_tokenizer(tokenizer):
    words = WordPieces.of(tokenizer)
    kinds = {c: words._kind(c) for c in ("\xa0", "\u3000", "’", "–", "東", "é", "É", "İ",
                                         "ß", "\u0301", "\u200b", "😀", "ł", "£", "Ł")}
    assert kinds == {"\xa0": " ", "\u3000": " ", "’": "word", "–": "word", "東": "word",
                     "é": "letter", "É": "letter", "İ": "letter", "ß": "joins", "\u0301": None,
                     "\u200b": None, "😀": "joins", "ł": "joins", "£": "joins", "Ł": None}
    assert words.split("a\xa0b’s [SEP]") is None  # an added token: the whole text
    assert words.split("a [sep]") == ["a", "[", "sep", "]"]  # not one: matched as written
    assert words.split("a\xa0B’s") == ["a", "b", "’", "s"]
    assert words.split("Café–Éclair") == ["cafe", "–", "eclair"]
    assert words.split("£5 Wrocław") == ["£5", "wrocław"]
    assert words.split("Straße") == ["straße"] and words.split("cafe\u0301") is None
    assert words.split("a\x0bb") is None


def test_memo_is_bounded_and_keeps_a_calls_words(tokenizer):
    words = WordPieces.of(tokenizer, memo_size=40)
    rng = random.Random(1)
    vocab = [f"w{i}x{i * 7}" for i in range(300)]
    for _ in range(5):
        batch = [" ".join(rng.choices(vocab, k=20)) for _ in range(10)]
        assert _ids(words, batch) == backend_ids(
            tokenizer.backend_tokenizer, batch)
        assert len(words._memo) <= max(40, len({w for t in batch for w in t.split()}))


def test_added_tokens_starting_with_a_titlecase_letter(tokenizer):
    """A cased tokenizer learns `ǅ` as part of a word; its added token `ǅx` (whose first
    letter is neither its own lower nor upper case) is still found."""
    cased = copy.deepcopy(tokenizer)
    cased.backend_tokenizer.normalizer = normalizers.BertNormalizer(lowercase=False)
    cased.add_tokens([AddedToken("ǅx", normalized=False)])
    words = WordPieces.of(cased)
    texts = ["ǅx", "a ǅx b", "ǅ", "ǆx ǄX"]
    assert words is not None
    assert _ids(words, texts) == backend_ids(cased.backend_tokenizer,
                                                                  texts)


def test_an_added_token_of_one_character(tokenizer):
    one = copy.deepcopy(tokenizer)
    one.add_tokens([AddedToken("¤", normalized=False)])
    words = WordPieces.of(one)
    texts = ["5¤ a", "¤", "no sign"]
    assert words is not None and words.split("5¤ a") is None
    assert _ids(words, texts) == backend_ids(one.backend_tokenizer, texts)


def test_characters_learnt_in_one_call_make_the_split_once(tokenizer):
    words = WordPieces.of(tokenizer)
    made = []
    pattern = word_pieces._split_pattern
    word_pieces._split_pattern = lambda *a: made.append(1) or pattern(*a)
    try:
        texts = ["".join(chr(c) for c in range(0x4E00 + 50 * i, 0x4E00 + 50 * (i + 1)))
                 for i in range(20)] + ["a\u3000b\u2009c"]
        got = words.ids(texts)
    finally:
        word_pieces._split_pattern = pattern
    assert len(made) == 1 and len(words._chars) >= 1000
    assert [x.tolist() for x in got] == backend_ids(tokenizer.backend_tokenizer, texts)


def test_the_table_of_characters_starts_again_when_full(tokenizer, monkeypatch):
    monkeypatch.setattr(word_pieces, "MAX_CHARACTERS", 30)
    words = WordPieces.of(tokenizer)
    texts = ["".join(chr(c) for c in range(0x4E00 + 20 * i, 0x4E00 + 20 * (i + 1))) + "\xa0x"
             for i in range(5)]
    for text in texts:
        assert words.ids([text])[0].tolist() == backend_ids(tokenizer.backend_tokenizer,
                                                            [text])[0]
        assert len(words._chars) <= 30 + 21


def test_a_tokenizer_without_added_tokens(tokenizer):
    words = WordPieces(tokenizer.backend_tokenizer, lowercase=True, added=[])
    plain = ["The Chipmunks (1958)", "naïve “quotes”", ""]
    assert _ids(words, plain) == backend_ids(tokenizer.backend_tokenizer,
                                                                  plain)


def test_other_tokenizers_get_none(tokenizer):
    other = copy.deepcopy(tokenizer)
    other.backend_tokenizer.normalizer = normalizers.Lowercase()
    assert WordPieces.of(other) is None
    assert WordPieces.of(object()) is None  # no Rust tokenizer behind it
    added = copy.deepcopy(tokenizer)
    assert added.add_tokens(["zzqé"]) == 1  # matched after normalising: in "ZZQE" too
    assert added("ZZQE", add_special_tokens=False)["input_ids"] == [len(added) - 1]
    assert WordPieces.of(added) is None
    assert SegmentEncoder(tokenizer, 64)._words is not None
    assert SegmentEncoder(other, 64)._words is None
    assert SegmentEncoder(tokenizer, 64, memo_size=0)._words is None


def test_make_room_empties_only_a_memo_that_would_overflow():
    memo = {"a": 1, "b": 2}
    word_pieces.make_room(memo, ["a"], new=1, size=3)  # just fits
    assert memo == {"a": 1, "b": 2}
    word_pieces.make_room(memo, ["a", "z"], new=2, size=3)
    assert memo == {"a": 1}


def test_ids_of_a_first_call_that_learns_one_space(tokenizer):
    # ids are int64 arrays; the word regex knows the space learnt by this very call
    for text in ("a\u00a0b", "x\u3000y z"):
        words = WordPieces.of(tokenizer)
        words._chars.clear()
        words._spaces.clear()
        words._stale = True
        words.ids(["plain"])  # the regex made, of no space
        (got,) = words.ids([text])
        assert got.dtype == "int64"
        assert got.tolist() == backend_ids(tokenizer.backend_tokenizer, [text])[0]
        assert words.split(text) == text.replace("\u00a0", " ").replace("\u3000", " ").split()


def test_a_word_of_its_own_keeps_the_ids_its_normal_form_gets(tokenizer):
    """U+037E (Greek question mark) is NFD-normalised to `;`: a word of its own whose ids
    are `;`'s, not the WordPiece model's for the raw character."""
    words = WordPieces.of(tokenizer)
    texts = ["why\u037e", "a\u0387b", "\u037e"]
    assert words.split("why\u037e") == ["why", "\u037e"]
    assert _ids(words, texts) == backend_ids(tokenizer.backend_tokenizer,
                                                                  texts)


def test_a_cased_tokenizer_learns_capitals_as_they_are(tokenizer):
    cased = copy.deepcopy(tokenizer)
    cased.backend_tokenizer.normalizer = normalizers.BertNormalizer(
        lowercase=False, strip_accents=False)
    words = WordPieces.of(cased)
    assert words is not None and words._letter == tuple(backend_ids(
        cased.backend_tokenizer, ["a"])[0])
    kinds = {c: words._kind(c) for c in ("Ł", "ł", "É", "Σ", "\xa0", "’")}
    assert kinds == {"Ł": "joins", "ł": "joins", "É": "joins", "Σ": "joins", "\xa0": " ",
                     "’": "word"}
    texts = ["Łódź É Σx", "Wrocław’s ÉCLAIR"]
    assert _ids(words, texts) == backend_ids(cased.backend_tokenizer,
                                                                  texts)
    cased.backend_tokenizer.normalizer = normalizers.BertNormalizer(
        lowercase=False, strip_accents=True)  # capitals lose their accents, as they are
    stripped = WordPieces.of(cased)
    assert [stripped._kind(c) for c in "Éé"] == ["letter", "letter"]
    assert stripped.split("ÉCLAIR é") == ["ECLAIR", "e"]


def test_the_table_of_characters_starts_again_only_past_its_size(tokenizer, monkeypatch):
    monkeypatch.setattr(word_pieces, "MAX_CHARACTERS", 3)
    words = WordPieces.of(tokenizer)
    words._chars.clear()
    words.ids(["東京都"])
    words.ids(["大"])  # 3 learnt: not past the size
    assert set(words._chars) == set("東京都大")
    words.ids(["阪"])
    assert set(words._chars) == {"阪"}


@pytest.mark.parametrize("change", ["no_clean_text", "whitespace_split", "word_level"])
def test_tokenizers_with_another_component_get_none(tokenizer, change):
    from tokenizers import models, pre_tokenizers

    other = copy.deepcopy(tokenizer)
    backend = other.backend_tokenizer
    if change == "no_clean_text":
        backend.normalizer = normalizers.BertNormalizer(clean_text=False)
    elif change == "whitespace_split":
        backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    else:
        backend.model = models.WordLevel(backend.get_vocab(), unk_token="[UNK]")
    assert word_pieces._components(backend) is None and WordPieces.of(other) is None
    assert word_pieces._components(tokenizer.backend_tokenizer) is not None
