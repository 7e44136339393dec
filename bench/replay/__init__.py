"""A trace through an engine: the run's configuration, the registered engines, the replayer and runner,
measurements, and the result set it writes (outputs, time series, OpenMetrics, manifests)."""
