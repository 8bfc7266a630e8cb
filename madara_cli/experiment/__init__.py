"""Running experiments: grids of cells (:mod:`.grid`), the engines a run keeps open
(:mod:`.engines`), the runner (:mod:`.runner`), Hydra launchers (:mod:`.launch`), cost
plans (:mod:`.plan`) and ``make reproduce`` (:mod:`.reproduce`)."""
