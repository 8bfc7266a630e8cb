"""The agents: their prompts, the three document assessors (scoring.py runs
requests.py, parsing.py, matrix.py and polarization.py) and the answer generators. The
prompt families they send are declared in :mod:`.families` (registered on import)."""

from madara_cli.agents import families  # noqa: F401  (registers the shipped prompt families)
