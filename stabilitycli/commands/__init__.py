"""One module per CLI sub-command beyond `analyze`; each exposes `command`, a
typer-annotated function. Modules here must not import polars or numpy at import
time, so that `stab --help` stays instant."""
