"""kiln's predictions from a fine-tuned classifier against transformers' on the same texts: the
exported folder (AutoModelForSequenceClassification) with the tokenizer of TOKENIZER_DIR
(AutoTokenizer, its own special tokens: [CLS] text [SEP], <s> text </s>), all texts in one padded
batch. Each row of kiln's predictions.csv (path = the text, class, probability) must name the
class transformers ranks first and its probability within 1e-5; prints the largest difference.

  check_predictions.py FOLDER TOKENIZER_DIR PREDICTIONS_CSV TEXTS_FILE
"""
import csv
import sys

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer


def main():
    folder, tokenizer_dir, predictions, texts_file = sys.argv[1:5]
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    with open(texts_file) as f:
        texts = [line.rstrip("\n") for line in f if line.strip()]
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        probs = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.softmax(-1)
    with open(predictions) as f:
        rows = list(csv.DictReader(f))
    if len(rows) != len(texts):
        sys.exit("%d predictions for %d texts" % (len(rows), len(texts)))
    worst = 0.0
    for text, row, p in zip(texts, rows, probs):
        best = int(p.argmax())
        label = model.config.id2label[best]
        if row["class"] != label:
            sys.exit("%r: kiln says %s, transformers %s (%s)" % (text, row["class"], label, p.tolist()))
        worst = max(worst, abs(float(row["probability"]) - float(p[best])))
    if worst > 1e-5:
        sys.exit("probabilities differ by %g" % worst)
    print("%s: %d texts, same classes, max |probability difference| %.3g" % (folder, len(texts), worst))


if __name__ == "__main__":
    main()
