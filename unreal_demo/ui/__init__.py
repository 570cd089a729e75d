"""The Gradio app: app (build_demo, one module per tab in tabs), splash (the page served while it loads),
answer_check (what is shown with every answer). Only this package imports Gradio."""

__all__ = ["answer_check", "app", "splash", "tabs"]
