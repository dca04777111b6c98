"""Moved to `transforms.io.counting`; kept only for `transforms/wiki/read.py`, which the
mwxml branch of issue 13 rewrites (its new imports name `transforms.io.counting`).
Delete this module at the merge."""

from transforms.io.counting import STATS_TAG, CountingDoFn, StatKey  # noqa: F401
