"""Running evaluators over datasets: the results store and the run loop."""
