"""Rebuild the app's ready examples from offline text: ``python assets/build_examples.py``.

1. needle: a one-sentence fact planted at 60% depth of a ~6,000-token haystack of Paul Graham essays.
2. wikipedia: the full SQuAD v1.1 dev article on Nikola Tesla (all its paragraphs, in order).
"""

import json
from pathlib import Path

from unreal_demo.backbone import load_backbone

from unreal_demo.data import load_essays, load_squad

HERE = Path(__file__).parent / "examples"
NEEDLE = ("The secret ingredient of the best pizza in Oakland is a spoonful of smoked paprika "
          "stirred into the tomato sauce.")


def main() -> None:
    tok = load_backbone().tokenizer
    essays, paragraphs, total = load_essays(), [], 0
    for essay in essays:
        for para in essay.text.split("\n\n"):
            if para.strip():
                paragraphs.append(para.strip())
                total += len(tok(para)["input_ids"])
        if total > 6000:
            break
    paragraphs.insert(int(len(paragraphs) * 0.6), NEEDLE)
    HERE.mkdir(exist_ok=True)
    (HERE / "needle_haystack.txt").write_text("\n\n".join(paragraphs) + "\n")
    passages, questions = load_squad("squad_dev")
    tesla = [p for p in passages if p.title == "Nikola Tesla"]
    (HERE / "wikipedia_nikola_tesla.txt").write_text("\n\n".join(p.text for p in tesla) + "\n")
    examples = [
        {"file": "needle_haystack.txt", "question": "What is the secret ingredient of the best pizza in Oakland?",
         "answer": "smoked paprika", "label": "Needle in a haystack (pizza)"},
        {"file": "wikipedia_nikola_tesla.txt", "question": "In what year did Tesla move to the United States?",
         "answer": "1884", "label": "Nikola Tesla article (1884)"},
    ]
    (HERE / "examples.json").write_text(json.dumps(examples, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
