from gemmtune.cli import main

main()
