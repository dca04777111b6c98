"""Text tools: tokenisers and external programs the metrics call.

- ptb.py: the PTB tokenizer as coco-caption runs it (Stanford CoreNLP's PTBTokenizer),
  in pure Python (`python`, the default) or through the jar (`jar`); ptb_lexer.py reads
  the lexer's tables out of the jar's class file.
- meteor_jvm.py: METEOR 1.5's JVM and its -stdio protocol.

Imports nothing else of this project; transforms/metrics builds on it.
"""
