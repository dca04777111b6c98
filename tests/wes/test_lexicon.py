from __future__ import annotations

import pytest

from transforms.wes.lexicon import (
    DEBIAN_WORDNET_DIR,
    lexnames_from_man_page,
    load_lexicon,
)


@pytest.fixture(scope="module")
def lexicon():
    return load_lexicon()


@pytest.mark.parametrize("text, expected", [
    ("dog", True),
    ("dogs", True),      # WordNet lemma "dog" is in the words list
    ("Dogs", True),      # lower-cased before lemmatising
    ("geese", True),     # exception list: goose
    ("running", True),
    ("U.S.", False),
    ("New York", False),  # more than one token
    ("Qwxzzy", False),
    ("", False),
])
def test_is_dictionary_word(lexicon, text, expected):
    assert lexicon.is_dictionary_word(text) is expected


def test_words_list_is_web2_sized(lexicon):
    assert 230_000 < lexicon.size < 240_000


@pytest.mark.skipif(not (DEBIAN_WORDNET_DIR / "index.noun").exists(), reason="no Debian WordNet")
def test_lexnames_rebuilt_from_man_page():
    rows = lexnames_from_man_page().splitlines()
    assert len(rows) == 45
    assert rows[0] == "00\tadj.all\t3" and rows[18] == "18\tnoun.person\t1"
    assert rows[44] == "44\tadj.ppl\t3"


@pytest.mark.skipif(not (DEBIAN_WORDNET_DIR / "index.noun").exists(), reason="no Debian WordNet")
def test_index_sense_keys_match_wordnet_conventions():
    from transforms.wes.lexicon import index_sense_from_data

    rows = {line.split()[0]: line.split()[1:] for line in index_sense_from_data(DEBIAN_WORDNET_DIR).splitlines()}
    assert rows["dog%1:05:00::"] == ["02084071", "1", "42"]
    assert rows["emergent%5:00:00:nascent:00"] == ["00003553", "2", "0"]  # satellite: head "nascent"
