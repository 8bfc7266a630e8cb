"""One function per paper table, grouped by topic. Each takes a results folder (or an
already loaded :class:`~madara_cli.tables.lookup.Results`) and returns a DataFrame of
``ours / paper (Δ)`` cells (see :mod:`madara_cli.tables.pairs`); nothing is re-run.

- :mod:`.main`          Tables 1, 2, 5, 7, 9 — the paper's main-body EM tables
- :mod:`.routing`       Tables 3, 8, 12, 19 — routing vs entropy, thresholds and the oracle
- :mod:`.diagnostics`   Tables 4, 10, 11, 13 — the RSC probe's diagnostics
- :mod:`.significance`  Tables 14, 15, 16 — McNemar, model scales, dense retrieval
- :mod:`.musique`       Tables 6, 17 and Appendix J — multi-hop MuSiQue
- :mod:`.cost`          Table 18 — cross-encoder reranking and LLM calls
- :mod:`.appendix`      Table G.1, §4.1 polarization, Appendix B (ATF), Appendix H (floor)
- :mod:`.common`        lookups several builders share
"""
