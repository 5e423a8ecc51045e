"""``specviz bench``: the runner (:mod:`.runner`), its method specs (:mod:`.method_specs`) and tallies
(:mod:`.tallies`), the report (:mod:`.report`), recorded runs read back (:mod:`.recorded_runs`), and the peers it
runs beside the engine (:mod:`.hf_baselines`, :mod:`.llamacpp_peer`)."""
