"""ipywidgets explorables for the notebooks: formula explorers (:mod:`.theory_explorers`) and explorers that run
the real engine on a button (:mod:`.run_explorers`)."""
