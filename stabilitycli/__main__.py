"""`python -m stabilitycli` is `stab`."""

from .cli import main

main()
