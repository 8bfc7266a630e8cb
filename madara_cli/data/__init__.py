"""Benchmarks, retrieval and the offline mini benchmark."""
