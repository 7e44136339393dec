import sys

try:  # Ctrl-C while the CLI's libraries load is one line too, as it is once a verb runs
    from bench.cli import main
except KeyboardInterrupt:
    print("txnbench: interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
