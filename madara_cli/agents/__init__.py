"""The agents: their prompts, the three document assessors (scoring.py runs
requests.py, parsing.py, matrix.py and polarization.py) and the answer generators."""
