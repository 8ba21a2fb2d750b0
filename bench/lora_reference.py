"""Hugging Face's Trainer with peft's LoRA on a Llama folder: the reference of bench/lora_speed.sh.

usage: lora_reference.py FOLDER WARMUP TIMED THREADS BATCH BLOCK R ALPHA TARGETS [--bf16] [--cuda]
                         [--compile] [--dora]

Loads FOLDER with AutoModelForCausalLM, wraps it with peft's get_peft_model (LoraConfig r, alpha,
no dropout, the comma-separated target modules) and trains WARMUP + TIMED steps of BATCH x BLOCK
tokens with transformers' Trainer on the CPU (AdamW, no logging, saving or evaluation; bf16=True
with --bf16, which runs the forward under torch.autocast in bf16 as Trainer does on the CPU; with
--cuda on the GPU, where Trainer puts the model, its batches and the autocast; with --compile,
Trainer's torch_compile=True: the model through torch.compile's Inductor, which fuses elementwise
work into generated C++ or Triton kernels, compiled during the warm-up steps; with --dora, peft's
DoRA, use_dora=True). The
tokens are random ids below the model's vocab_size (their values do not change the work). Prints
the timed steps' tokens/s on the last line, timed from the end of the last warm-up step.
"""

import sys
import time

import torch
from peft import LoraConfig, get_peft_model
from transformers import (AutoModelForCausalLM, Trainer, TrainerCallback,
                          TrainingArguments)


class Blocks(torch.utils.data.Dataset):
    def __init__(self, count, block, vocab):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (count, block), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class StepClock(TrainerCallback):
    """The time at each step's end; on a GPU, after the device finished the steps that bound the
    timed ones (the last warm-up step and the last step)."""

    def __init__(self, sync_at):
        self.ends, self.sync_at = [], sync_at

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step in self.sync_at:
            torch.cuda.synchronize()
        self.ends.append(time.perf_counter())


def main():
    folder, warmup, timed, threads, batch, block, r, alpha, targets = sys.argv[1:10]
    warmup, timed, threads, batch, block = map(int, (warmup, timed, threads, batch, block))
    bf16 = "--bf16" in sys.argv[10:]
    cuda = "--cuda" in sys.argv[10:]
    compile_model = "--compile" in sys.argv[10:]
    dora = "--dora" in sys.argv[10:]
    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=int(r), lora_alpha=int(alpha), lora_dropout=0.0,
                                             target_modules=targets.split(","), use_dora=dora))
    steps = warmup + timed
    args = TrainingArguments(output_dir="/tmp/lora_reference", use_cpu=not cuda, bf16=bf16,
                             per_device_train_batch_size=batch, max_steps=steps,
                             learning_rate=1e-3, optim="adamw_torch", logging_strategy="no",
                             save_strategy="no", eval_strategy="no", report_to=[],
                             torch_compile=compile_model, dataloader_num_workers=0, disable_tqdm=True, seed=0)
    clock = StepClock((warmup, steps) if cuda else ())
    trainer = Trainer(model=model, args=args,
                      train_dataset=Blocks(batch * steps, block, model.config.vocab_size),
                      callbacks=[clock])
    trainer.train()
    seconds = clock.ends[-1] - clock.ends[warmup - 1]
    print(f"{timed * batch * block / seconds:.1f}")


if __name__ == "__main__":
    main()
