"""Public agent trajectories for the learning loop's real-data measurement (issue 24): converters to
one intermediate format (:mod:`trajectories.convert`) and the causes tables a run is scored
against (:mod:`trajectories.causes`)."""
