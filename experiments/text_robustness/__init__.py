"""The text-classification robustness study on SST-2, AdvGLUE and MR."""
