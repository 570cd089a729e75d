"""One module per tab of the app, layout and wiring only: long_document, wikipedia, topn, intrinsic (the By layer
tab), flops, about."""

__all__ = ["about", "flops", "intrinsic", "long_document", "topn", "wikipedia"]
