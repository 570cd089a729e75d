"""The Gradio app: one module per tab. Only this package imports Gradio."""
