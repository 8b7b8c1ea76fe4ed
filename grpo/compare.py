"""`python -m grpo.compare`: the sweep comparison, which lives in grpo/cli/compare.py."""

if __name__ == "__main__":
    import sys

    from grpo.cli.compare import main

    sys.exit(main())
