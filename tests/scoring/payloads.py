"""What another local process sends a served model in the trust tests."""

from __future__ import annotations

import os


class Planted:
    """Unpickling this makes a folder: the proof that a payload ran."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))
