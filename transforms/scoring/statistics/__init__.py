"""Corpus statistics: what a metric needs of the whole corpus, served to each batch.

    RowBatches ─┬─ global_statistics.ComputeCorpusStatistics: statistics bounded by the
                │   vocabulary (BERTScore idf), one CombineGlobally -> a side input
                └─ corpus_stats.ShardedCiderStatistics: CIDEr-D document frequencies,
                    summed per n-gram shard (ngram_hashes.py); each batch joined with
                    the frequencies of the n-grams it reads in each corpus
                    (batch_texts.py), or on this machine found in the tables written
                    to files (frequency_files.py)

statistics_file.py writes and reads `--save_corpus_statistics` / `--corpus_statistics`
(idf and document frequencies frozen from another corpus). Imports reading only.
"""
