"""Scripted scenarios and their result tables: the fixed set of runs ``txnbench compare`` adds,
throughput, migration v4 -> v5, the non-transactional demo."""
