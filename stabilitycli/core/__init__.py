"""What every layer stands on: result types, configuration, metric names, errors and number
formatting. Nothing here imports a layer above it, and nothing here imports polars at module
level."""
