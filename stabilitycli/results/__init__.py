"""Results of earlier sweeps, kept so a rerun analyses only the runs that changed.

`store.ResultsStore` is the SQLite file behind `stab analyze --results PATH` and
`stab summary PATH`; `fingerprint` says what a stored result depends on. Nothing here
is imported by `stab --help`: the commands import it when they use it.
"""
