"""`stab compare`: two runs (or a restart inside one) aligned and judged (`runs`), plus
`--expect` checks (`expect`)."""
