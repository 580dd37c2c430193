"""The CIFAR-10 robustness study (not a library: built on advjax, never imported by it)."""
