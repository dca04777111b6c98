"""The dictionary-word filter (Huang 2022): a link text that is a dictionary word is not
an entity name, unless the title is one too (then the pair is kept).

`AnnotateDictionaryFn` evaluates it once per (title, text) pair, when the clusters are
built, and marks the texts it drops (`TitleLinks.dictionary_dropped`); every threshold k
reuses the mark (`BuildCorpus` counts the drops per corpus). The word list: lexicon.py.
"""


import dataclasses

from transforms.io.counting import CountingDoFn
from transforms.wes.tally import TitleLinks


class AnnotateDictionaryFn(CountingDoFn):
    """`(title, cluster)` -> the cluster, with the texts the dictionary-word filter drops
    marked (when it is on)."""

    def __init__(self, dictionary_filter: bool):
        super().__init__("dedup", ["titles", "pairs", "incoming_links",
                                   "pairs:dictionary_word_text"])
        self._dictionary_filter = dictionary_filter
        self._lexicon = None

    def setup(self):
        if self._dictionary_filter:
            from transforms.wes.lexicon import load_lexicon

            self._lexicon = load_lexicon()

    def process(self, keyed: tuple[str, TitleLinks]):
        _, cluster = keyed
        self.count("titles")
        self.count("pairs", len(cluster.texts))
        self.count("incoming_links", cluster.incoming)
        if self._lexicon is None or self._lexicon.is_dictionary_word(cluster.title):
            yield cluster
            return
        dropped = frozenset(t for t in cluster.texts if self._lexicon.is_dictionary_word(t))
        if not dropped:
            yield cluster
            return
        self.count("pairs:dictionary_word_text", len(dropped))
        yield dataclasses.replace(cluster, dictionary_dropped=dropped)
