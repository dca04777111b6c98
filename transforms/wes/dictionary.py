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
    """A batch of clusters (a tuple, `BuildClusters`) -> the batch, with the texts the
    dictionary-word filter drops marked in each cluster (when it is on)."""

    def __init__(self, dictionary_filter: bool):
        super().__init__("dedup", ["titles", "pairs", "incoming_links",
                                   "pairs:dictionary_word_text"])
        self._dictionary_filter = dictionary_filter
        self._lexicon = None

    def setup(self):
        if self._dictionary_filter:
            from transforms.wes.lexicon import load_lexicon

            self._lexicon = load_lexicon()

    def _annotated(self, cluster: TitleLinks) -> TitleLinks:
        is_word = self._lexicon.is_dictionary_word
        if is_word(cluster.title):
            return cluster
        dropped = frozenset(t for t in cluster.texts if is_word(t))
        if not dropped:
            return cluster
        return dataclasses.replace(cluster, dictionary_dropped=dropped)

    def process(self, batch: tuple[TitleLinks, ...]):
        self.count("titles", len(batch))
        self.count("pairs", sum(len(c.texts) for c in batch))
        self.count("incoming_links", sum(c.incoming for c in batch))
        if self._lexicon is None:
            yield batch
            return
        batch = tuple(map(self._annotated, batch))
        self.count("pairs:dictionary_word_text", sum(len(c.dictionary_dropped) for c in batch))
        yield batch
