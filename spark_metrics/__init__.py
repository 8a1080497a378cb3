"""PySpark StreamingQueryListener that reports query offsets to lagwatch (see README)."""
