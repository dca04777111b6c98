"""The meta-evaluation report: how each metric agrees with the human judgments.

    report_spec.py: --report_subsets, --accuracy_threshold, --report_min_n (build time)
    scopes.py: the statistics per scope (rows, systems, subsets): correlations,
        accuracy, AUROC, with bootstrap intervals and the paired test (bootstrap.py,
        vectorised; its cells and resample weights: bootstrap_cells.py)
    report_render.py: markdown tables and the PNG

Run once every scored record is gathered (outputs/write.py's WriteReport). Imports
nothing else of transforms/scoring.
"""
