"""`make demo`'s orchestration: the product end to end on the bundled real data.

`pipelines/demo.py` wires it: mine WES (`pipelines.mine_wes`), then train
(training.py: `training_plan` decides the runs that fit the time budget, `run_lanes`
runs them as `python -m pipelines.train_*` subprocesses in two lanes side by side,
`describe_training` reads what each reached), then score (scoring.py: `scoring_jobs`, the
scoring runs over the KPQA and SAS releases' judgments; `sas_table`, the SQuAD-SAS
figures beside the SAS paper's Table 2).
"""
