"""What a Python callback on every step costs: kiln.fit of a tiny MLP (batch 8, so a step is cheap)
with and without a kiln.Callback whose on_train_batch_end does nothing, interleaved in rounds.
Prints seconds per run and the cost per call: (with - without) / steps.
    PYTHONPATH=build/python .venv/bin/python bench/python_callback.py [ROUNDS] [STEPS]"""
import statistics
import sys
import tempfile
import time

import kiln

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 3000


class Nothing(kiln.Callback):
    def on_train_batch_end(self, trainer, loss):
        pass


def run(callbacks):
    with tempfile.TemporaryDirectory() as tmp:
        job = kiln.Job(overrides=["model=mlp", "model.hidden=[16]", "data.batch_size=8", "trainer.num_threads=1",
                                          "trainer.max_steps=%d" % steps, "trainer.limit_val_batches=0",
                                          "trainer.num_sanity_val_steps=0", "test=false", "callbacks=none",
                                          "hydra.run.dir=" + tmp + "/run"], callbacks=callbacks)
        t0 = time.perf_counter()
        job.fit()
        return time.perf_counter() - t0


without, with_ = [], []
for r in range(rounds):
    without.append(run([]))
    with_.append(run([Nothing()]))
    print("round %d: without %.3f s, with %.3f s" % (r + 1, without[-1], with_[-1]), flush=True)
a, b = statistics.median(without), statistics.median(with_)
print("median: without %.3f s, with %.3f s; %.1f us per call over %d steps (ratio %.3f)"
      % (a, b, 1e6 * (b - a) / steps, steps, b / a))
