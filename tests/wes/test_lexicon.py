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


def test_lemmas_equal_nltks_on_every_word_and_exception_form(lexicon):
    """The cached decision reproduces NLTK's WordNet lemmatiser exactly."""
    import nltk

    from transforms.wes.lexicon import _lemma_only_wordnet

    reader = _lemma_only_wordnet(nltk.data.find("corpora/wordnet"))
    forms = sorted(lexicon._words | set(reader._exception_map["n"]))
    forms += [f + suffix for f in forms[::50] for suffix in ("s", "es", "ies", "men", "ches")]
    assert len(forms) > 240_000
    differing = [f for f in forms if lexicon.noun_lemmas(f) != reader._morphy(f, "n")]
    assert differing == []
    assert lexicon.lemmatize("geese") == "goose" == reader._morphy("geese", "n")[0]


def test_lexicon_cache_is_reused_rebuilt_when_stale_and_survives_garbage(tmp_path, monkeypatch, caplog):
    import logging
    import os

    from transforms.wes import lexicon as module

    path = tmp_path / "cache.pickle"
    built = module.load_lexicon_data(path)
    assert path.exists()
    calls = []
    real = module.read_lexicon_data
    monkeypatch.setattr(module, "read_lexicon_data", lambda: calls.append(1) or real())
    again = module.load_lexicon_data(path)
    assert calls == [] and again.words == built.words and again.noun_lemmas == built.noun_lemmas

    # A source file that changed since the cache was written: rebuilt from NLTK.
    source, size, mtime = built.sources[0]
    stale = module.LexiconData(**{**module.dataclasses.asdict(built),
                                  "sources": ((source, size + 1, mtime),)})
    with open(path, "wb") as f:
        module.pickle.dump(module.dataclasses.asdict(stale), f)
    assert module.load_lexicon_data(path).sources == built.sources and calls == [1]

    # A truncated file: logged, ignored, rewritten.
    path.write_bytes(b"\x80\x05garbage")
    with caplog.at_level(logging.WARNING):
        assert module.load_lexicon_data(path).words == built.words
    assert "unreadable lexicon cache" in caplog.text and calls == [1, 1]
    assert os.path.getsize(path) > 1_000_000
