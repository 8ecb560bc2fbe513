"""Orchestration: read a run, run the rules, walk the tree (`run`); one run or many (`batch`)."""
