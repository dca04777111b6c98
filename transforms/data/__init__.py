"""The data the demo, the examples, the tests and the benchmarks read: where each file
comes from and how it reaches the cache folder (a leaf: imports nothing else of this
project; the entry point is `pipelines/fetch_data.py`, `qa-data`).

- registry.json: one entry per file (path in the cache, size, SHA-256, original URL or
  none, licence, how the served form becomes the kept one, recipe, provenance).
- registry.py: the entries read and validated (`load_registry`, `select`), the cache
  folder and mirror defaults.
- download.py: one transfer into a partial file: HTTP(S) with resume (urllib), or a copy
  from a mirror folder.
- fetch.py: an entry into the cache, checked, renamed into place only when right
  (`Fetcher`, `fetch`, `FetchError`).
"""
