"""Beam's model inference for the learned metrics, knowing nothing of scoring rows.

    handlers.build_handler: a `ModelUse` -> a Beam `ModelHandler` (windows that double,
        devices, model copies; transforms/models loads and runs the model)
    multi_use.MultiUseModelHandler: one RunInference for every model use, failures
        isolated input by input
    model_server.py, model_channel.py: one copy of a model shared by a machine's worker
        processes, reachable only by the run that started it (a private folder and a
        key proved both ways)
    model_flags.MODEL_FLAG_TABLE: the command line of the model options

Above transforms/metrics and transforms/models (which stays free of Beam), below
transforms/scoring, whose score/run_model_metrics.py feeds it batches of rows.
"""
