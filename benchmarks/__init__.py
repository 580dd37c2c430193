"""Speed benchmark of advjax against the PyTorch reference (`python -m benchmarks.run`)."""
