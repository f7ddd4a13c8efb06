import sys

if sys.argv[1:2] == ["run"]:
    # `python -m autotuner run -- script.py ...`: the script runs with every autotuned kernel installed, in a process
    # that imports no more of autotuner than its kernels need (not the command line's modules)
    from autotuner.decorator.install import run_script

    del sys.argv[1]
    run_script(sys.argv[1:])
else:
    from autotuner.cli import main

    main()
