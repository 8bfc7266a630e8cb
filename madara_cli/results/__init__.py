"""Everything madara writes under ``results/`` and reads back, one room per job:

- :mod:`.outputs`       the typed records (CellRecord, ProbeRecord) and their schema version
- :mod:`.record_files`  the files of a cell and a probe: the only code that opens them
- :mod:`.prompt_log`    ``prompts.jsonl``, the logged requests of a cell or probe
- :mod:`.provenance`    what produced a number (versions, commit, engine, overrides)
- :mod:`.stored`        the results index the tables read (``load_results``)
- :mod:`.summary`       ``summary.csv`` / ``summary.parquet``, one row per finished cell
- :mod:`.long_format`   a rendered table as tidy numeric rows (``<table>.long.csv``)
- :mod:`.tracking`      ``logger=mlflow | wandb``
"""
