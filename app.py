"""UNREAL Explorer: ``python app.py [--model ID] [--head PATH] [--device D] [--dtype T] [--host H] [--port P]``.

Every flag also reads an environment variable (for a Space): ``UNREAL_MODEL``, ``UNREAL_HEAD``,
``UNREAL_DEVICE``, ``UNREAL_DTYPE``, ``GRADIO_SERVER_NAME``, ``GRADIO_SERVER_PORT``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from unreal_demo.core.backbone import DEFAULT_MODEL, BackboneError
from unreal_demo.core.head import HeadError
from unreal_demo.pipeline import Explorer


def main() -> int:
    env = os.environ.get
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=env("UNREAL_MODEL", DEFAULT_MODEL))
    parser.add_argument("--head", default=env("UNREAL_HEAD"))
    parser.add_argument("--device", default=env("UNREAL_DEVICE"))
    parser.add_argument("--dtype", default=env("UNREAL_DTYPE"))
    parser.add_argument("--trust-remote-code", action="store_true", help="run code shipped with the model (unsafe)")
    parser.add_argument("--host", default=env("GRADIO_SERVER_NAME", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(env("GRADIO_SERVER_PORT", "7860")))
    parser.add_argument("--share", action="store_true")
    args = parser.parse_args()
    t0 = time.perf_counter()
    print(f"UNREAL Explorer: loading {args.model} (first run converts the offline GGUF once) …", flush=True)
    try:
        explorer = Explorer.load(args.model, head=args.head, device=args.device, dtype=args.dtype,
                                 trust_remote_code=args.trust_remote_code)
    except (BackboneError, HeadError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    b = explorer.backbone
    print(f"loaded {b.name} on {b.device} ({b.dtype}) with head {explorer.head_source} "
          f"in {time.perf_counter() - t0:.1f} s; building the app …", flush=True)
    from unreal_demo.ui.app import CSS, build_demo

    build_demo(explorer).launch(server_name=args.host, server_port=args.port, share=args.share, css=CSS,
                                max_file_size="16mb")
    return 0


if __name__ == "__main__":
    sys.exit(main())
