"""`stab watch`: follow a growing run and judge it as it grows (issue #38)."""
