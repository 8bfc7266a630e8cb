"""Everything madara writes under ``results/`` and reads back (:mod:`.store`)."""
