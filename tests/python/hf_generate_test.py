"""A Hugging Face language model folder, made by transformers and tokenizers themselves (a tiny
random Llama and GPT-2 with a byte-level BPE tokenizer trained here), generates in kiln as
transformers' generate does: greedy text equal token for token through kiln.Predictor(DIR),
`kiln predict experiment=pretrained_lm`, and `kiln serve`'s /v1/completions (whole and streamed).
Conversations rendered through the folder's chat template by `python -m kiln.chat` train on the
assistant's turns alone. Skips (exit 77) without transformers in the .venv."""
import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

KILN = os.environ["KILN_BINARY"]

try:
    import torch  # noqa: F401  (first, as users do)
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
except ImportError as e:
    print(f"skipped: transformers or tokenizers is not in this Python ({e})")
    sys.exit(77)
import kiln
import kiln.chat

TEXT = ["Call me Ishmael. Some years ago, never mind how long precisely, having little or no money "
        "in my purse, and nothing particular to interest me on shore."] * 40
PROMPTS = ["Call me", "Some years ago, never", "money in my"]


def make_folder(root, family):
    """A tiny random model of `family` with a byte-level BPE tokenizer, save_pretrained into
    root/family; its greedy continuations of PROMPTS (16 new tokens each, decoded)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TEXT, trainers.BpeTrainer(
        vocab_size=320, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                                bos_token="<|endoftext|>")
    torch.manual_seed(7)
    v = tok.get_vocab_size()
    if family == "llama":
        config = transformers.LlamaConfig(
            vocab_size=v, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
            bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id)
        model = transformers.LlamaForCausalLM(config)
    else:
        config = transformers.GPT2Config(vocab_size=v, n_positions=128, n_embd=48, n_layer=2,
                                         n_head=4, bos_token_id=fast.bos_token_id,
                                         eos_token_id=fast.eos_token_id)
        model = transformers.GPT2LMHeadModel(config)
    model.eval()
    folder = os.path.join(root, family)
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    expected = []
    for prompt in PROMPTS:
        ids = fast(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=16, do_sample=False,
                                 attention_mask=torch.ones_like(ids), pad_token_id=fast.eos_token_id)
        expected.append(fast.decode(out[0], skip_special_tokens=True))
    return folder, expected


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
CONVERSATIONS = [
    [{"role": "system", "content": "You answer briefly."},
     {"role": "user", "content": "Call me"},
     {"role": "assistant", "content": "Ishmael."},
     {"role": "user", "content": "Some years ago?"},
     {"role": "assistant", "content": "never mind how long precisely"}],
    [{"role": "user", "content": "money in my"}, {"role": "assistant", "content": "purse"}],
]


class HfGenerate(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.folders = {family: make_folder(cls.tmp.name, family) for family in ("llama", "gpt2")}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_predictor_generates_as_transformers(self):
        for family, (folder, expected) in self.folders.items():
            predictor = kiln.Predictor(folder)
            self.assertTrue(predictor.generates)
            for prompt, text in zip(PROMPTS, expected):
                self.assertEqual(predictor.generate(prompt, max_new_tokens=16, temperature=0), text,
                                 f"{family}: {prompt!r}")
            # The prompts together, left-padded in one batch: the same texts.
            self.assertEqual(predictor.generate(PROMPTS, max_new_tokens=16, temperature=0), expected,
                             family)

    def test_kiln_predict_and_serve_generate_as_transformers(self):
        folder, expected = self.folders["llama"]
        run = subprocess.run(
            [KILN, "predict", "experiment=pretrained_lm", f"model.pretrained={folder}",
             f"task.prompt={PROMPTS[0]}", "task.max_tokens=16",
             f"hydra.run.dir={self.tmp.name}/predict"], capture_output=True, text=True, timeout=300)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(run.stdout, expected[0] + "\n")
        # A folder of another family than model= says so in one line.
        wrong = subprocess.run(
            [KILN, "predict", "experiment=pretrained_lm", "model=gpt2", f"model.pretrained={folder}",
             f"task.prompt={PROMPTS[0]}", f"hydra.run.dir={self.tmp.name}/wrong"],
            capture_output=True, text=True, timeout=300)
        self.assertEqual(wrong.returncode, 2, wrong.stderr)
        self.assertIn("model_type", wrong.stderr.strip().splitlines()[-1])

        port = free_port()
        server = subprocess.Popen(
            [KILN, "serve", "experiment=pretrained_lm", f"model.pretrained={folder}",
             f"serve.port={port}", f"hydra.run.dir={self.tmp.name}/serve"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(600):
                try:
                    if urllib.request.urlopen(url + "/readyz", timeout=2).status == 200:
                        break
                except OSError:
                    time.sleep(0.1)
            else:
                self.fail("kiln serve did not become ready")

            def post(body):
                request = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                                 {"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=120) as answer:
                    return answer.read().decode()

            whole = json.loads(post({"prompt": PROMPTS, "max_tokens": 16, "temperature": 0}))
            self.assertEqual([c["text"] for c in whole["choices"]],
                             [e[len(p):] for p, e in zip(PROMPTS, expected)])
            streamed = ""
            for event in post({"prompt": PROMPTS[1], "max_tokens": 16, "temperature": 0,
                               "stream": True}).split("\n\n"):
                if event.startswith("data: ") and event != "data: [DONE]":
                    streamed += json.loads(event[6:])["choices"][0]["text"]
            self.assertEqual(streamed, expected[1][len(PROMPTS[1]):])
        finally:
            server.terminate()
            server.wait(timeout=60)

    def test_conversations_render_and_train_on_the_assistants_turns(self):
        """python -m kiln.chat renders conversations through a folder's chat template (transformers'
        apply_chat_template), and data=instructions learns exactly the assistant's turns: kiln's
        examples are the ids transformers gives the whole rendered text, with targets at the tokens
        inside each assistant turn alone (found here from the rendered text and the tokenizer's
        offsets, not from kiln.chat's segments)."""
        with tempfile.TemporaryDirectory() as tmp:
            folder = self.folders["llama"][0]
            fast = transformers.AutoTokenizer.from_pretrained(folder)
            fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
            fast.chat_template = CHATML
            chat = os.path.join(tmp, "chat")
            fast.save_pretrained(chat)
            source, rendered = os.path.join(tmp, "chat.jsonl"), os.path.join(tmp, "rendered.jsonl")
            with open(source, "w") as f:
                f.write("".join(json.dumps({"messages": c}) + "\n" for c in CONVERSATIONS))
            run = subprocess.run([sys.executable, "-m", "kiln.chat", "--tokenizer", chat, source,
                                  rendered], capture_output=True, text=True, timeout=300)
            self.assertEqual(run.returncode, 0, run.stderr)
            self.assertIn("2 conversations (3 assistant turns to learn)", run.stderr)
            with open(rendered) as f:
                records = [json.loads(line)["segments"] for line in f]
            whole = [fast.apply_chat_template(c, tokenize=False) for c in CONVERSATIONS]
            for segments, text, conversation in zip(records, whole, CONVERSATIONS):
                self.assertEqual("".join(t for t, _ in segments), text)
                self.assertEqual([t for t, trained in segments if trained],
                                 [m["content"] + "<|im_end|>\n" for m in conversation
                                  if m["role"] == "assistant"])

            dm = kiln.data_module({"_target_": "instruction_text", "train": rendered,
                                   "val_fraction": 0.0, "block_size": 256, "batch_size": 1,
                                   "tokenizer": {"_target_": "pretrained", "path": chat}})
            examples = [(b["input"][0].tolist(), b["target"][0].tolist()) for b in dm.train_loader()]
            self.assertEqual(len(examples), 2)
            for text in whole:
                encoded = fast(text, add_special_tokens=False, return_offsets_mapping=True)
                ids = encoded["input_ids"]
                spans, at = [], 0
                opening, closing = "<|im_start|>assistant\n", "<|im_end|>\n"
                while text.find(opening, at) >= 0:
                    start = text.find(opening, at) + len(opening)
                    at = text.find(closing, start) + len(closing)
                    spans.append((start, at))
                learned = [any(a <= offset[0] < b for a, b in spans)
                           for offset in encoded["offset_mapping"]]
                expected = (ids[:-1], [i if t else -100 for i, t in zip(ids[1:], learned[1:])])
                self.assertIn(expected, examples)
                self.assertGreaterEqual(sum(learned), 3)  # the turn, <|im_end|> and "\n"

            # kiln trains the folder on them (its embeddings grown to the two new tokens), with
            # LoRA, validating on the responses' loss.
            model = transformers.AutoModelForCausalLM.from_pretrained(folder)
            model.resize_token_embeddings(len(fast), mean_resizing=False)
            model.save_pretrained(chat)
            train = subprocess.run(
                [KILN, "train", "experiment=pretrained_lm", "data=instructions",
                 f"data.train={rendered}", f"data.val={rendered}", f"model.pretrained={chat}",
                 "model.lora={r:4,alpha:8,target_modules:[q_proj,v_proj]}", "trainer.max_steps=4",
                 "test=false", f"hydra.run.dir={tmp}/sft"], capture_output=True, text=True,
                timeout=300)
            self.assertEqual(train.returncode, 0, train.stderr)
            self.assertIn("new best val/loss=", train.stderr)

            # A template that rewrites earlier turns is refused naming the line; so is a line
            # without messages, and a folder without a template.
            fast.chat_template = ("{% for m in messages %}{% if loop.last %}{{ m['content'] }}"
                                  "{% endif %}{% endfor %}")
            rewriting = os.path.join(tmp, "rewriting")
            fast.save_pretrained(rewriting)
            for tokenizer, line, expected in [
                    (rewriting, json.dumps({"messages": CONVERSATIONS[1]}),
                     "chat.jsonl:1: the chat template renders an earlier part"),
                    (chat, json.dumps({"prompt": "a"}),
                     "chat.jsonl:1: no 'messages' field (the record has: prompt)"),
                    (folder, json.dumps({"messages": CONVERSATIONS[1]}),
                     "the tokenizer has no chat template")]:
                with open(source, "w") as f:
                    f.write(line + "\n")
                err = io.StringIO()
                with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as exit:
                    kiln.chat.main(["--tokenizer", tokenizer, source, rendered + ".bad"])
                self.assertEqual(exit.exception.code, 1, err.getvalue())
                self.assertEqual(len(err.getvalue().strip().splitlines()), 1, err.getvalue())
                self.assertIn(expected, err.getvalue())
                self.assertFalse(os.path.exists(rendered + ".bad"))
            # An output that cannot be written (its folder is missing) is one line too.
            with open(source, "w") as f:
                f.write(json.dumps({"messages": CONVERSATIONS[1]}) + "\n")
            err = io.StringIO()
            with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as exit:
                kiln.chat.main(["--tokenizer", chat, source, os.path.join(tmp, "no", "out.jsonl")])
            self.assertEqual(exit.exception.code, 1, err.getvalue())
            self.assertEqual(len(err.getvalue().strip().splitlines()), 1, err.getvalue())
            self.assertIn("out.jsonl: cannot write it", err.getvalue())


if __name__ == "__main__":
    unittest.main(verbosity=2)
