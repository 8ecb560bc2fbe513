"""`python -m stabilitycli` is `stab`."""

from stabilitycli.cli import main

main()
