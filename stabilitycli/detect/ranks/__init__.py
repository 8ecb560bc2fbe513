"""Per-rank outliers (spec section 5): the cohort statistics, the 2-rank pair rule and the check."""
