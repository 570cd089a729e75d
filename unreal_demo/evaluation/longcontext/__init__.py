"""The long-context benchmark (paper Section 4, Appendix B.2): ``contexts`` builds LOFT-style contexts from real
text, ``run`` scores and answers them at every n (``bench longcontext``), ``report`` turns a result into tables and
captions."""

__all__ = ["contexts", "report", "run"]
