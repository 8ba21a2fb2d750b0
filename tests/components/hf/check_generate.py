"""transformers generating from a folder kiln exported with its tokenizer (kiln export format=hf
of a language model trained with kiln's own tokenizer): AutoTokenizer reads the folder's
tokenizer.json, AutoModelForCausalLM its weights, and greedy generate continues PROMPT by at most
NEW tokens, never producing the NEVER ids (kiln's padding and other specials) and ending at
EOS, as kiln's generation does. Prints the prompt's ids on one line and the continuation's text
(special tokens left out) on the next, for the caller to compare with `kiln predict`'s.

  check_generate.py DIR PROMPT NEW EOS [NEVER...]
"""
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main():
    folder, prompt, new, eos = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    never = [int(i) for i in sys.argv[5:]]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    model.eval()
    ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                             do_sample=False, eos_token_id=eos, pad_token_id=never[0] if never else eos,
                             suppress_tokens=never or None)
    print(" ".join(str(i) for i in ids[0].tolist()))
    print(tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True))


if __name__ == "__main__":
    main()
