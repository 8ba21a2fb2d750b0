"""Chat conversations rendered through a model's chat template, for kiln's supervised fine-tuning.

Chat data holds a `messages` list per JSONL record ({"role": "user", "content": "..."}, as Hugging
Face's chat datasets and OpenAI's format hold them). A model's chat template (the Jinja template in
its tokenizer_config.json) turns the list into the text the model was tuned on. kiln renders it with
transformers' own `apply_chat_template` (Jinja2) and writes each conversation as segments of that
text, each marked with whether the model learns to write it: the assistant's turns, with the
template's end-of-turn marker. `data=instructions` trains on such records, with only the assistant's
tokens as targets (torchtune's `train_on_input=False`, TRL's `assistant_only_loss`):

    python -m kiln.chat --tokenizer DIR chat.jsonl rendered.jsonl
    kiln train experiment=... data=instructions data.train=rendered.jsonl model.pretrained=DIR

The segments come from rendering growing prefixes of the conversation: the text up to each assistant
turn (with the template's generation prompt), then up to its end. Their concatenation is the whole
conversation's rendering, character for character. A template that renders a prefix as something
other than the start of the whole (one that rewrites earlier turns, as some reasoning models'
templates drop earlier thinking) cannot be split this way, and the conversation is refused naming
its line.
"""
import argparse
import json
import os
import sys
from typing import Dict, List, Sequence, Tuple

Segments = List[Tuple[str, bool]]


def render(messages: Sequence[Dict[str, str]], tokenizer, **template_kwargs) -> Segments:
    """`messages` through `tokenizer`'s chat template, as [(text, trained)]: the assistant's turns
    trained, the rest not. Raises ValueError with what is wrong."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ValueError("messages is not a non-empty list")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or "content" not in m:
            raise ValueError(f"message {i} is not an object with a role and a content")
    if messages[0]["role"] == "assistant":
        raise ValueError("the conversation starts with the assistant's turn: nothing prompts it")

    def text(upto: int, generation_prompt: bool) -> str:
        try:
            return tokenizer.apply_chat_template(list(messages[:upto]), tokenize=False,
                                                 add_generation_prompt=generation_prompt,
                                                 **template_kwargs)
        except Exception as e:  # the template's own refusals (raise_exception) and Jinja's errors
            raise ValueError(f"the chat template refused it: {type(e).__name__}: {e}") from None

    segments: Segments = []
    done = ""

    def take(upto: str, trained: bool) -> None:
        nonlocal done
        if not upto.startswith(done):
            raise ValueError("the chat template renders an earlier part of the conversation as "
                             "other than the start of the whole (it rewrites earlier turns), so "
                             "the assistant's turns cannot be told apart")
        if len(upto) > len(done):
            if segments and segments[-1][1] == trained:
                segments[-1] = (segments[-1][0] + upto[len(done):], trained)
            else:
                segments.append((upto[len(done):], trained))
        done = upto

    turns = 0
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            take(text(i, True), False)
            take(text(i + 1, False), True)
            turns += 1
    if turns == 0:
        raise ValueError("the conversation has no assistant turn to learn")
    take(text(len(messages), False), False)
    return segments


def _fail(message: str) -> None:
    print(f"kiln.chat: {message}", file=sys.stderr)
    sys.exit(1)


def main(argv: Sequence[str] = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m kiln.chat",
        description="Render chat conversations (JSONL, a messages list per record) through a "
                    "model's chat template into the segments kiln's data=instructions trains on.")
    parser.add_argument("--tokenizer", required=True,
                        help="a Hugging Face model or tokenizer folder whose tokenizer has a chat "
                             "template")
    parser.add_argument("--field", default="messages", help="the records' list of messages")
    parser.add_argument("input", help="JSONL, one conversation per line")
    parser.add_argument("output", help="JSONL written: {\"segments\": [[text, trained], ...]}")
    args = parser.parse_args(argv)
    try:
        from transformers import AutoTokenizer
    except ImportError as e:
        _fail(f"needs transformers (pip install transformers): {e}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    except Exception as e:
        _fail(f"{args.tokenizer}: not a tokenizer transformers reads: {type(e).__name__}: "
              f"{str(e).splitlines()[0] if str(e) else ''}")
    if not getattr(tokenizer, "chat_template", None):
        _fail(f"{args.tokenizer}: the tokenizer has no chat template (tokenizer_config.json's "
              "chat_template); without one, write prompt and response fields instead")
    out_lines = []
    turns = 0
    try:
        with open(args.input, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        _fail(f"{args.input}: cannot read it: {e}")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{args.input}:{number}"
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            _fail(f"{where}: not a JSON object")
        if args.field not in record:
            _fail(f"{where}: no '{args.field}' field (the record has: {', '.join(record) or 'nothing'})")
        try:
            segments = render(record[args.field], tokenizer)
        except ValueError as e:
            _fail(f"{where}: {e}")
        turns += sum(1 for _, trained in segments if trained)
        out_lines.append(json.dumps({"segments": [[t, trained] for t, trained in segments]},
                                    ensure_ascii=False))
    if not out_lines:
        _fail(f"{args.input}: no conversations")
    # Written whole or not at all.
    partial = args.output + ".partial"
    try:
        with open(partial, "w", encoding="utf-8") as f:
            f.write("\n".join(out_lines) + "\n")
        os.replace(partial, args.output)
    except OSError as e:
        if os.path.exists(partial):
            os.unlink(partial)
        _fail(f"{args.output}: cannot write it: {e.strerror or e}")
    print(f"kiln.chat: {len(out_lines)} conversations ({turns} assistant turns to learn) rendered "
          f"through {args.tokenizer}'s chat template into {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
