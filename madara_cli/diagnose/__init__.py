"""The Diagnose arm: chain perturbations and RSC statistics (:mod:`.rsc`), the probe
that measures them on a model (:mod:`.probe`) and the one routing rule (:mod:`.router`)."""
