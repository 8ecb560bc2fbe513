"""Orchestration: read a run, run the rules, walk the tree (`run`), for one run or many (`batch`)."""
