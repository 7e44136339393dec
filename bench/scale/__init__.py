"""Replays past one process: Spark sharding of a trace and its result sets, and the filesystems (local,
s3://, hdfs://) they live on."""
