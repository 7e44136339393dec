"""Traces in: the event format and its readers (Parquet, CSV, JSON lines), validation, generation from
workload profiles, OMB workloads, trace statistics."""
