"""One module per CLI sub-command (`cli.COMMANDS` lists them); each exposes `command`,
a typer-annotated function. Modules here must not import polars or numpy at import
time, so that `stab --help` stays instant."""
