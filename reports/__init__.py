"""Reports: pure functions from result files (JSONL) to markdown tables and plots. No torch, no CUDA."""
