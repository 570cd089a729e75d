"""UNREAL Explorer: ``python app.py [--model ID] [--head PATH] [--device D] [--dtype T] [--host H] [--port P]``.

Every flag also reads an environment variable (for a Space): ``UNREAL_MODEL``, ``UNREAL_HEAD``,
``UNREAL_DEVICE``, ``UNREAL_DTYPE``, ``GRADIO_SERVER_NAME``, ``GRADIO_SERVER_PORT``. ``UNREAL_OPEN_STORES=1|0``
lets visitors open any index folder or Qdrant store in the Wikipedia tab, or not; by default they may unless the
app is public (on a Space, with ``--share``, or on a host other than loopback). The header's model picker offers
every offline model on a laptop (another loads in the background; at most two in memory); a public app offers the
models ``UNREAL_MODELS`` lists (comma-separated), else only ``--model`` (the picker is shown disabled, saying why).
"""

from __future__ import annotations

import argparse
import sys
import threading
from typing import TYPE_CHECKING

from unreal_demo.settings import (  # standard library only, as the splash
    DEFAULT_MODEL,
    OFFLINE_MODELS,
    env,
    open_stores,
    picker_models,
    public,
)
from unreal_demo.ui.splash import Splash  # standard library only: the port serves before anything heavy imports

if TYPE_CHECKING:
    from unreal_demo.serving import Loading


def _report(loader: Loading) -> None:
    """Print the loading's outcome on the console (the page shows it too)."""
    from unreal_demo.errors import UserError

    try:
        loader.get()
        print(loader.status(), flush=True)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
    except Exception:  # a bug: its traceback in the log
        import traceback

        traceback.print_exc()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=env("UNREAL_MODEL"),
                        help=f"an offline model ({' or '.join(OFFLINE_MODELS)}), a Hugging Face id or a folder "
                             "(default: the offline default model)")
    parser.add_argument("--head", default=env("UNREAL_HEAD"))
    parser.add_argument("--device", default=env("UNREAL_DEVICE"))
    parser.add_argument("--dtype", default=env("UNREAL_DTYPE"))
    parser.add_argument("--trust-remote-code", action="store_true", help="run code shipped with the model (unsafe)")
    parser.add_argument("--host", default=env("GRADIO_SERVER_NAME", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(env("GRADIO_SERVER_PORT", "7860")))
    parser.add_argument("--share", action="store_true")
    args = parser.parse_args()
    try:
        stores = open_stores(share=args.share, host=args.host)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        splash = Splash(args.host, args.port)
    except OSError as exc:
        print(f"error: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    print(f"UNREAL Explorer: starting on http://{args.host}:{splash.port}/ (importing PyTorch and Gradio) …",
          flush=True)
    splash.step("importing PyTorch and the UNREAL library")
    from unreal_demo.errors import UserError
    from unreal_demo.serving import Loading, Models

    args.model = args.model or DEFAULT_MODEL
    # the header's model picker: every offline model on a laptop; on a public app those $UNREAL_MODELS lists
    offered, reason = picker_models(args.model, public(share=args.share, host=args.host))

    try:
        loader = Loading(args.model, head=args.head, device=args.device, dtype=args.dtype,
                         trust_remote_code=args.trust_remote_code)
    except UserError as exc:  # a missing or damaged head file: nothing to serve
        splash.fail(str(exc))
        print(f"error: {exc}", file=sys.stderr)
        return 2
    splash.step("importing Gradio and building the six tabs")
    from unreal_demo.ui.app import CSS, build_demo

    models = Models(loader, offered, reason, device=args.device, dtype=args.dtype,
                    trust_remote_code=args.trust_remote_code)
    try:
        demo = build_demo(models, open_stores=stores)
    except Exception as exc:  # a bug: the page and any waiting client hear it, the log has the traceback
        splash.fail(f"building the page failed: {type(exc).__name__}: {exc}")
        raise
    splash.hand_over()
    try:
        demo.launch(server_name=args.host, server_port=splash.port, share=args.share, css=CSS,
                    max_file_size="16mb", prevent_thread_lock=True)
    except OSError as exc:  # the port was taken in the moment it changed hands
        splash.fail(str(exc))
        print(f"error: cannot serve on {args.host}:{splash.port}: {exc}", file=sys.stderr)
        return 2
    splash.served()
    # the model loads once the page is served (a load thread started earlier slows building the page)
    print(f"UNREAL Explorer: serving; loading {args.model} in the background (the page shows the progress; "
          "the first start converts the offline GGUF once) …", flush=True)
    loader.start()
    threading.Thread(target=_report, args=(loader,), daemon=True).start()
    demo.warm()  # the worked example, computed once as soon as the model is in (each page draws it)
    demo.block_thread()
    return 0


if __name__ == "__main__":
    sys.exit(main())
