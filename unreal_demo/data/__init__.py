"""The data: sources (the registry, readers, splits; fetch and wikitext behind it), textio (reading a user's
document), answers (SQuAD's answer normalisation) and natural (NQ-open and TriviaQA mapped to our passages)."""

__all__ = ["answers", "natural", "sources", "textio"]
