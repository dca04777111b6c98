"""Empty files on S3: Beam's S3 writer corrected.

Beam (2.77) writes every S3 file as a multipart upload and sends a part only when it has
bytes, so an empty file (a dead-letter file of a run with no dead letters, an empty
shard) completes an upload of no parts, which S3 refuses ("MalformedXML":
CompleteMultipartUpload needs one part or more; moto's S3 server refuses it the same
way). `correct_empty_uploads` makes such an upload send one empty part first, which S3
takes as the last (and only) part, as other S3 clients do. It patches
`S3Uploader.finish` once per process; `transforms.io` calls it when imported, so every
process that runs the project's DoFns (launcher and workers) has it.
"""

from __future__ import annotations

import functools

_APPLIED = "_qa_eval_empty_upload_corrected"


def correct_empty_uploads() -> bool:
    """Corrects Beam's `S3Uploader.finish` in this process (once); False when Beam's
    S3 module is missing or has no such method (a Beam that changed it)."""
    try:
        from apache_beam.io.aws import s3io
    except ImportError:
        return False
    uploader = getattr(s3io, "S3Uploader", None)
    finish = getattr(uploader, "finish", None)
    if finish is None or getattr(finish, _APPLIED, False):
        return finish is not None
    if not all(hasattr(uploader, name) for name in ("_write_to_s3",)):
        return False

    @functools.wraps(finish)
    def finish_with_a_part(self):
        if not self.buffer and not self.parts and self.last_error is None:
            self._write_to_s3(b"")  # an empty file: its one part, empty
        return finish(self)

    setattr(finish_with_a_part, _APPLIED, True)
    uploader.finish = finish_with_a_part
    return True
