"""`python -m stabilitycli` is `stab`."""

from stabilitycli.entry import main

main()
