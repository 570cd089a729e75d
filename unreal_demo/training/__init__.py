"""The later stages of the default head's recipe, run by ``python -m unreal_demo train --stage alpha|joint``.

sets (the natural and SQuAD-style training, dev and test sets over the shipped index), judged (the sets whose
positives were read), alpha (α retrained on cached query states), joint (ρ and α fine-tuned through the LLM).
"""

__all__ = ["alpha", "joint", "judged", "sets"]
