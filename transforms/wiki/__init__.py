"""The Wikipedia half of the mining pipeline: dump files -> pages -> raw links.

Flow (the first stages of `MineWes`, transforms/wes/mine.py; transforms/wes/ takes over
from `ExtractLinks`' output)::

    dump files ──> ReadPages (read.py) ──pages (namespace 0)──> ExtractLinks (extract.py)
                     │ io/decompress.py: checked decompression,      │ links.py: the fast path and
                     │   multistream byte ranges                  │   mwparserfromhell fallback
                     │                                            │ masking.py: opaque regions
                     │                                            │   (comments, nowiki, ...)
                     │ dump.py: the XML page parser               │ guard.py: time limit of a
                     │                                            │   whole-page parse
                     ├─redirects──> transforms/wes/redirects.py   └─links (one tuple per page)──>
                     ├─bad_files──> stats.json (complete: false)       FilterLinks (transforms/wes/)
                     └─stats

- Beam-free modules: transforms/io/decompress.py, dump.py, links.py, masking.py, guard.py
  (plain functions, tested without a runner); read.py and extract.py are the Beam stages
  around them.
- Bad input costs the page, never the run: parser failures and time-outs are counted by
  reason (`extract_links/filtered:*`), unreadable files are reported or fail the run
  (`--skip_bad_files`).
"""
