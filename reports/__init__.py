"""Reports: pure functions from result files to markdown tables and plots, and the one results-row schema
(`reports.schema.ResultRow`) every producer writes and every consumer (tables, plots, the gate) reads.
No torch, no CUDA."""
