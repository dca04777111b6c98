"""Outputs: the scored records and dead letters written, summarised and published.

    scored lists, dead letters ─┬─ write.WriteScores (parts per bundle, merged),
                                │   WriteDeadLetters
                                ├─ summary.SummarizeScores -> write.WriteSummary
                                │   (checks that every row read reached the outputs)
                                └─ write.WriteReport (report/)
        -> finalize.FinalizeOutputs: the run's files moved in place of the earlier
           run's, summary last, once the run's ownership is checked
           (transforms/io/publish.py, transforms/io/ownership.py)

paths.py names the outputs at the prefix; manifest.py the code and signatures recorded.
Imports report only.
"""
