"""``python sweep.py --space search_spaces/smoke.yaml``: the front door (see README)."""

from sweep_engine.cli import exit_process, main

if __name__ == "__main__":
    exit_process(main())
