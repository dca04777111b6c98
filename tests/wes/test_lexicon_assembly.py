"""The Debian assembly of NLTK's corpora: the rebuilt `lexnames` and `index.sense`."""

from __future__ import annotations

import pytest

from transforms.wes.lexicon_assembly import DEBIAN_WORDNET_DIR, lexnames_from_man_page


@pytest.mark.skipif(not (DEBIAN_WORDNET_DIR / "index.noun").exists(), reason="no Debian WordNet")
def test_lexnames_rebuilt_from_man_page():
    rows = lexnames_from_man_page().splitlines()
    assert len(rows) == 45
    assert rows[0] == "00\tadj.all\t3" and rows[18] == "18\tnoun.person\t1"
    assert rows[44] == "44\tadj.ppl\t3"


@pytest.mark.slow
@pytest.mark.skipif(not (DEBIAN_WORDNET_DIR / "index.noun").exists(), reason="no Debian WordNet")
def test_index_sense_keys_match_wordnet_conventions():
    from transforms.wes.lexicon_assembly import index_sense_from_data

    rows = {line.split()[0]: line.split()[1:] for line in index_sense_from_data(DEBIAN_WORDNET_DIR).splitlines()}
    assert rows["dog%1:05:00::"] == ["02084071", "1", "42"]
    assert rows["emergent%5:00:00:nascent:00"] == ["00003553", "2", "0"]  # satellite: head "nascent"
