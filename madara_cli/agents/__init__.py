"""Agent prompts: the three document assessors (scoring.py) and the answer generators."""
