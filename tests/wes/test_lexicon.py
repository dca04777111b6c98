from __future__ import annotations

import pytest

from transforms.wes.lexicon import load_lexicon


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


@pytest.mark.slow
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


@pytest.mark.slow
def test_lexicon_cache_is_reused_rebuilt_when_stale_and_survives_garbage(tmp_path, monkeypatch, caplog):
    import json
    import logging
    import os

    from transforms.wes import lexicon as module

    path = tmp_path / module.CACHE_NAME
    built = module.load_lexicon_data(path)
    assert path.exists() and json.loads(path.read_text())["format"] == module.CACHE_NAME
    calls = []
    real = module.read_lexicon_data
    monkeypatch.setattr(module, "read_lexicon_data", lambda: calls.append(1) or real())
    again = module.load_lexicon_data(path)
    assert calls == [] and again == built

    # A source file that changed since the cache was written: rebuilt from NLTK.
    source, size, mtime = built.sources[0]
    stale = module.dataclasses.replace(built, sources=((source, size + 1, mtime),))
    path.write_text(json.dumps(module._to_json(stale)))
    assert module.load_lexicon_data(path).sources == built.sources and calls == [1]

    # A truncated file, or JSON of another shape: logged, ignored, rewritten.
    for garbage in (path.read_bytes()[:1000], b'{"format": "%s", "words": 1}' % module.CACHE_NAME.encode()):
        path.write_bytes(garbage)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert module.load_lexicon_data(path) == built
        assert "unreadable lexicon cache" in caplog.text
    assert calls == [1, 1, 1]
    assert os.path.getsize(path) > 1_000_000


class _Payload:
    """Unpickling this runs code: it writes the marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('ran')",)


def test_a_planted_pickle_cache_is_never_unpickled(tmp_path, monkeypatch, lexicon, caplog):
    """The old cache name and the new one both hold a malicious pickle, in the folder that
    QA_EVAL_NLTK_DATA points at: neither runs, the cache is rebuilt as JSON, the old
    pickle is removed."""
    import json
    import logging
    import pickle

    from transforms.wes import lexicon as module

    marker = tmp_path / "pwned"
    monkeypatch.setenv("QA_EVAL_NLTK_DATA", str(tmp_path))
    legacy, current = (tmp_path / n for n in (*module.LEGACY_CACHE_NAMES, module.CACHE_NAME))
    for path in (legacy, current):
        path.write_bytes(pickle.dumps(_Payload(marker)))
    data = module.LexiconData(lexicon._words, lexicon._noun_lemmas, lexicon._exceptions,
                              lexicon._substitutions, ())
    monkeypatch.setattr(module, "read_lexicon_data", lambda: data)
    assert not hasattr(module, "pickle")
    assert module.cache_path() == current
    with caplog.at_level(logging.WARNING):
        assert module.load_lexicon_data() == data
    assert not marker.exists()
    assert "unreadable lexicon cache" in caplog.text
    assert json.loads(current.read_text())["format"] == module.CACHE_NAME
    assert not legacy.exists()
    # The payload was live: unpickling it does write the marker.
    pickle.loads(pickle.dumps(_Payload(marker)))
    assert marker.read_text() == "ran"
