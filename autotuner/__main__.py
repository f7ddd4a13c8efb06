from autotuner.cli import main

main()
