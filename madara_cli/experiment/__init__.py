"""Running experiments: grids of cells (:mod:`.grid`), the runner and its engine pool
(:mod:`.runner`), Hydra launchers (:mod:`.launch`), cost plans (:mod:`.plan`) and
``make reproduce`` (:mod:`.reproduce`)."""
