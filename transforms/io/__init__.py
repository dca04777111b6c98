"""Infrastructure shared by every pipeline (imports nothing else of this project).

- cli.py: the command-line frame (`run_main`, one-line errors, exit codes, alerts; a file
  the user handed in that cannot be read is one line and exit 2 wherever it is found).
- options.py: flags both pipelines share (`--input`, `--output`, `--overwrite`).
- progress.py: progress lines of a local run.
- local_malloc.py: glibc's malloc tuned for a local run (`tune_local_malloc`).
- counting.py: `CountingDoFn`, the one way a stage counts what passed and why a record
  was filtered (Beam counters plus counts carried as data).
- worker_gc.py: the garbage collector of a process running our DoFns, set for
  throughput (once per process, from `CountingDoFn.start_bundle`).
- publish.py: temp-then-rename publishing of a run's files (the summary last), so a
  killed run never leaves output that looks complete.
- ownership.py: one owner per output (a lock beside it, with a heartbeat): a second run
  into an output that a live run owns is refused at launch.
- lock_owner.py: the owner a lock file names (`Owner`) and whether it is taken for dead
  (`stale_reason`).
- decompress.py: checked decompression ahead of the reader (dumps, compressed inputs).
- dask_runner.py: Beam's DaskRunner with its translation faults corrected
  (`--runner transforms.io.dask_runner.DaskRunner`; needs dask and distributed).
- storage.py: the file systems and runner a command line needs, checked at launch (one
  line naming the extra to install), and the run's options handed to `FileSystems`.
- s3_fixes.py: Beam's S3 client corrected (empty files; a boto3 session per thread),
  in the launcher and, through `--beam_plugins`, in a run's worker processes.
- beam_signatures.py: Beam's function signatures worked out once per function, and a
  DoFn's state and timer specs once per DoFn, wherever `counting.py` is imported.
- beam_option_views.py: Beam's pipeline-option views made once per options object and
  class (a third of a small run's time), wherever `counting.py` is imported.
- worker_shutdown.py: the in-process runner's worker processes stopped together.
- in_process_memory.py: Beam's in-process runner holding a stage's data once (its data
  channel and the groupings a stage reads), installed by a local run.
- private_folder.py: a folder of the machine's temporary directory only this user can
  reach (the served models' address, lock and socket files).
"""
