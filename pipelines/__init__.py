"""The entry points. Importing the package first drops the "apitools not found" warning
that importing Beam logs (the GCP client libraries are not needed here)."""

from transforms.io.cli import silence_apitools_warning

silence_apitools_warning()
