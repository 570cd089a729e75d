"""UNREAL Explorer: ``python app.py [--model ID] [--head PATH] [--host H] [--port P] [--share]``."""

from __future__ import annotations

import argparse
import sys

from unreal_demo.backbone import DEFAULT_MODEL, BackboneError
from unreal_demo.head import HeadError
from unreal_demo.pipeline import Explorer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--head", default=None)
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument("--share", action="store_true")
    args = parser.parse_args()
    try:
        explorer = Explorer.load(args.model, head=args.head, device=args.device, dtype=args.dtype,
                                 trust_remote_code=args.trust_remote_code)
    except (BackboneError, HeadError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from unreal_demo.ui.app import CSS, build_demo

    build_demo(explorer).launch(server_name=args.host, server_port=args.port, share=args.share, css=CSS,
                                max_file_size="16mb")
    return 0


if __name__ == "__main__":
    sys.exit(main())
