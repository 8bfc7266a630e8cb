"""Loaders of the paper's benchmarks (registered into data.loaders.LOADERS)."""
