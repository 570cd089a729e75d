"""``python -m unreal_demo``: the command line (:mod:`unreal_demo.cli`)."""
from unreal_demo.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
