"""A Hugging Face language model folder, made by transformers and tokenizers themselves (a tiny
random Llama and GPT-2 with a byte-level BPE tokenizer trained here), generates in kiln as
transformers' generate does: greedy text equal token for token through kiln.Predictor(DIR),
`kiln predict experiment=pretrained_lm`, and `kiln serve`'s /v1/completions (whole and streamed).
Skips (exit 77) without transformers in the .venv."""
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


if __name__ == "__main__":
    unittest.main(verbosity=2)
