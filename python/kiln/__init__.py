"""kiln from Python: kiln's configs (Hydra 1.3's composition and override grammar) and its native
training loop, on the torch of this environment.

    import kiln
    cfg = kiln.compose(overrides=["experiment=fashion_mnist"])      # a dict
    metrics = kiln.fit(["experiment=fashion_mnist", "trainer.max_epochs=1"])

Errors in a config, an override or a file raise kiln.KilnError (a ValueError) with kiln's one-line
message (file:line, did-you-mean). docs/python.md says more.
"""
import abc as _abc
import warnings as _warnings
from typing import Dict, Optional, Sequence

# torch first: its libraries (LibTorch, libtorch_python) are kiln's, and once loaded they are the
# ones the extension binds to, wherever this torch is installed. The package does not require torch
# from pip (that would pull torch's NVIDIA packages, gigabytes, into a CPU environment that
# installed torch without them); it checks the version here instead.
import torch as _torch

from ._build import TORCH_VERSION as _BUILT_FOR

if _torch.__version__.split("+")[0] != _BUILT_FOR:
    raise ImportError("kiln was built against torch %s, and this environment has torch %s: install torch==%s, "
                      "or rebuild kiln here (pip install .)" % (_BUILT_FOR, _torch.__version__, _BUILT_FOR))


def _overrides(overrides: Sequence[str]) -> list:
    # A single string would be read as a list of its characters.
    if isinstance(overrides, (str, bytes)):
        raise TypeError("overrides is a list of strings, e.g. [%r], not one string" % overrides)
    return [str(o) for o in overrides]

try:
    from ._kiln import __version__  # noqa: F401
except ModuleNotFoundError as _missing:
    if _missing.name != __name__ + "._kiln":
        raise
    import os as _os
    raise ImportError("kiln's extension kiln._kiln is not built in %s: run scripts/setup.sh (it builds it where "
                      "python3-dev is installed), or ninja -C build kiln_python" % _os.path.dirname(__file__)) from None

from ._kiln import DataModule, KilnError, __version__, default_config_dir, load_yaml
from ._kiln import Job as _NativeJob
from ._kiln import Trainer as _NativeTrainer
from ._kiln import Predictor as _Predictor
from ._kiln import report_html as _report_html
from ._kiln import Model, NativeCallback, NativeLogger, instantiate
from ._kiln import compose as _compose

__all__ = ["Callback", "Job", "KilnError", "Predictor", "ProgressBar", "Trainer", "compose", "data_module", "fit", "instantiate", "read_run", "report",
           "__version__"]


class Trainer(metaclass=_abc.ABCMeta):
    """kiln's loop (C++ kiln::Trainer), as a callback's hooks get it: global_step, current_epoch,
    train_batches_per_epoch, max_epochs, max_steps, callback_metrics, request_stop(reason). kiln makes
    it; a job (kiln.Job) has one.

    In kiln 0.1.0 and before, this name was the job itself: kiln.Trainer(overrides=...) and
    kiln.Trainer(cfg) still make a kiln.Job, with a DeprecationWarning, until the version after 0.1.0."""

    def __new__(cls, *args, **kwargs):
        _warnings.warn("kiln.Trainer(...) is now kiln.Job(...) (kiln.Trainer is the loop a callback gets, as "
                       "in C++); this alias is removed after kiln 0.1.0", DeprecationWarning,
                       stacklevel=2)
        return Job(*args, **kwargs)


Trainer.register(_NativeTrainer)
# The loop's old Python name, for callbacks annotated with it; removed in the next version.
LoopState = _NativeTrainer


class Callback:
    """A callback in Python, called from kiln's loop at Lightning's hooks. Override the hooks you need;
    `trainer` is a kiln.Trainer (global_step, current_epoch, callback_metrics, request_stop()).
    An exception stops the run and is raised from the kiln call (fit, test, ...) as it was."""

    def on_fit_start(self, trainer: Trainer) -> None: ...
    def on_fit_end(self, trainer: Trainer) -> None: ...
    def on_train_epoch_start(self, trainer: Trainer) -> None: ...
    def on_train_epoch_end(self, trainer: Trainer) -> None: ...
    def on_train_batch_end(self, trainer: Trainer, loss: float) -> None: ...
    def on_validation_start(self, trainer: Trainer) -> None: ...
    def on_validation_end(self, trainer: Trainer, metrics: Dict[str, float]) -> None: ...
    def on_test_end(self, trainer: Trainer, metrics: Dict[str, float]) -> None: ...


_HOOKS = [name for name in vars(Callback) if name.startswith("on_")]


class ProgressBar(Callback):
    """A progress bar per epoch with the loss and the last validation metrics, drawn by tqdm.auto: a
    widget in Jupyter (with ipywidgets), text elsewhere. kiln's own progress_bar callback writes to
    the process's stderr, which a notebook does not show; kiln.fit adds this one (progress=True)."""

    def __init__(self, refresh_rate: int = 20):
        self.refresh_rate = max(1, int(refresh_rate))
        self._bar = None
        self._pending = 0

    def on_train_epoch_start(self, trainer):
        from tqdm.auto import tqdm
        total = trainer.train_batches_per_epoch or None
        self._bar = tqdm(total=total, desc="epoch %d" % trainer.current_epoch, leave=True, dynamic_ncols=True)
        self._pending = 0

    def on_train_batch_end(self, trainer, loss):
        self._pending += 1
        if self._bar is not None and self._pending >= self.refresh_rate:
            self._bar.update(self._pending)
            self._bar.set_postfix(loss="%.4f" % loss, refresh=False)
            self._pending = 0

    def on_validation_end(self, trainer, metrics):
        if self._bar is not None:
            self._bar.set_postfix({k: "%.4f" % v for k, v in metrics.items() if k.startswith("val/")}, refresh=True)

    def on_train_epoch_end(self, trainer):
        self.on_fit_end(trainer)

    def on_fit_end(self, trainer):
        if self._bar is not None:
            self._bar.update(self._pending)
            self._bar.close()
            self._bar = None


def _add_callbacks(job, callbacks, loggers=()):
    for callback in callbacks:
        if isinstance(callback, NativeCallback):  # kiln.instantiate({"_target_": "early_stopping", ...})
            job.add_native(callback)
            continue
        if not isinstance(callback, Callback):
            raise TypeError("kiln callbacks derive from kiln.Callback or come from kiln.instantiate, not %s"
                            % type(callback).__name__)
        hooks = {h for h in _HOOKS if getattr(type(callback), h) is not getattr(Callback, h)}
        job.add_callback(callback, hooks)
    for logger in loggers:
        if not isinstance(logger, NativeLogger):
            raise TypeError("loggers= takes kiln loggers from kiln.instantiate (csv, jsonl, tensorboard), not %s"
                            % type(logger).__name__)
        job.add_native(logger)


def compose(config_name: str = "train", overrides: Sequence[str] = (), config_dir: Optional[str] = None) -> dict:
    """The config `kiln train OVERRIDES` would run, composed and resolved, as nested dicts and lists.

    paths.output_dir is the run folder hydra.run.dir names (not created)."""
    return _compose(config_name, _overrides(overrides), config_dir or "")


class Job:
    """A training job (C++ kiln::Job): `Job(overrides=[...])` composes as `kiln train` does (the run
    folder and its .hydra files are written), `Job(cfg)` takes a composed config (a dict from
    kiln.compose, perhaps changed) and writes into cfg["paths"]["output_dir"] (or output_dir). Then
    fit(), validate(), test(), predict(), as Lightning's Trainer."""

    def __init__(self, cfg: Optional[dict] = None, *, overrides: Sequence[str] = (), output_dir: Optional[str] = None,
                 config_name: str = "train", config_dir: Optional[str] = None, evaluate: bool = False,
                 callbacks: Sequence[Callback] = (), loggers: Sequence = (), model=None):
        if cfg is not None and overrides:
            raise ValueError("kiln.Job takes a config or overrides, not both")
        if model is not None:
            # Your own torch.nn.Module: scripted, saved in the run folder and named as the config's model.
            if cfg is None:
                cfg = _compose(config_name, _overrides(overrides), config_dir or "")
                overrides = ()
            output_dir = output_dir or cfg["paths"]["output_dir"]
            cfg["model"] = {"_target_": "torchscript", "path": _save_model(model, output_dir)}
        if cfg is None:
            self._job = _NativeJob.from_overrides(_overrides(overrides), config_name, config_dir or "", evaluate)
        else:
            if output_dir is None:
                output_dir = (cfg.get("paths") or {}).get("output_dir") or (cfg.get("trainer") or {}).get("default_root_dir")
            if not output_dir:
                raise ValueError("kiln.Job(cfg): the config has no paths.output_dir; pass output_dir=")
            self._job = _NativeJob.from_dict(cfg, str(output_dir), evaluate)
        _add_callbacks(self._job, callbacks, loggers)

    @property
    def output_dir(self) -> str:
        """The run folder: checkpoints/, metrics.csv, test_metrics.yaml."""
        return self._job.output_dir

    @property
    def config(self) -> dict:
        """The job's resolved config."""
        return self._job.config

    def fit(self) -> None:
        """Trains: epochs, validation, checkpoints, resume from ckpt_path."""
        self._job.fit()

    def validate(self) -> Dict[str, float]:
        """Evaluates on the validation split (val_metrics.yaml) and returns the metrics."""
        return self._job.validate()

    def test(self) -> Dict[str, float]:
        """Evaluates on the test split (test_metrics.yaml, the confusion matrix) and returns the metrics."""
        return self._job.test()

    def load_checkpoint(self, which: str) -> str:
        """Loads weights: a checkpoint file, "last" or "best"; returns the file."""
        return self._job.load_checkpoint(which)

    def predict(self, checkpoint: str = "last"):
        """The data module's prediction split answered by this job's trained model (checkpoint: "last",
        "best" or a file), as `kiln predict` writes it: a list of dicts, in the split's order."""
        return Predictor(self.load_checkpoint(checkpoint)).predict_split()

    def metrics(self, as_frame: bool = False):
        """What the csv logger wrote (metrics.csv): a dict per logged step, or a pandas DataFrame."""
        return _read_metrics(self.output_dir, as_frame)


def fit(overrides: Sequence[str] = (), config_name: str = "train", config_dir: Optional[str] = None,
        callbacks: Sequence[Callback] = (), progress: bool = False, model=None, loggers: Sequence = ()) -> Dict[str, float]:
    """`kiln train OVERRIDES` in one call: fits, then tests the best checkpoint (unless the config says
    test: false). Returns the test metrics ({} without a test). progress=True draws a ProgressBar;
    model= trains your own torch.nn.Module (TorchScript) instead of the config's model. callbacks= and
    loggers= add to the config's: kiln.Callback subclasses, or kiln components from kiln.instantiate."""
    callbacks = list(callbacks) + ([ProgressBar()] if progress else [])
    job = Job(overrides=overrides, config_name=config_name, config_dir=config_dir, callbacks=callbacks,
              loggers=loggers, model=model)
    return job._job.fit_then_test()


def data_module(cfg: dict, seed: int = 0) -> DataModule:
    """kiln's data module of a config node (cfg["data"] of kiln.compose), with train_loader(),
    val_loader() and test_loader(): iterables of {"input", "target", ...} torch.Tensors, loaded by
    kiln's threads outside the GIL with kiln's per-sample seeded randomness."""
    return DataModule(cfg, seed)


def _read_metrics(run_dir: str, as_frame: bool = False):
    import csv
    import os
    path = os.path.join(run_dir, "metrics.csv")
    rows = []
    if os.path.exists(path):
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                rows.append({k: (int(float(v)) if k in ("step", "epoch") else float(v))
                             for k, v in row.items() if v not in ("", None)})
    if not as_frame:
        return rows
    try:
        import pandas
    except ImportError as e:
        raise ImportError("metrics(as_frame=True) needs pandas (pip install pandas); without it: a list of dicts") from e
    return pandas.DataFrame(rows)


def read_run(run_dir: str, as_frame: bool = False) -> dict:
    """A finished (or running) run folder as Python objects: its resolved config
    (.hydra/config.yaml), its metrics (metrics.csv, as for Job.metrics) and its test metrics."""
    import os
    if not os.path.isdir(os.path.join(run_dir, ".hydra")):
        raise KilnError("%s is not a kiln run folder (no .hydra/)" % run_dir)
    out = {"dir": os.path.abspath(run_dir), "config": None, "metrics": _read_metrics(run_dir, as_frame), "test": {}}
    config = os.path.join(run_dir, ".hydra", "config.yaml")
    if os.path.exists(config):
        out["config"] = load_yaml(config)
    test = os.path.join(run_dir, "test_metrics.yaml")
    if os.path.exists(test):
        out["test"] = {k: float(v) for k, v in (load_yaml(test) or {}).items()}
    return out


class Predictor:
    """A trained model answering inputs, as `kiln predict` and `kiln serve` do: `path` is a run folder,
    a kiln checkpoint, a `kiln export` folder, or a Hugging Face language model folder (config.json,
    model.safetensors, tokenizer.json: Llama, Mistral, Qwen2, GPT-2), which generates. overrides= change the stored config (a moved data
    folder: ["data.root=/new/place"]); quantize="dynamic_int8" runs Linear layers in int8."""

    def __init__(self, path: str, overrides: Sequence[str] = (), quantize: Optional[str] = None):
        self._p = _Predictor(str(path), _overrides(overrides), quantize)

    def predict(self, inputs):
        """bytes (an image or audio file's contents) or str (a text): one answer, a dict as `kiln predict`
        writes it (class_index, class, probability, probabilities; or text). A list of them: a list of
        answers from one forward pass. A torch.Tensor [B, ...] of prepared inputs (what the data
        module's evaluation transforms give): a list of B answers."""
        import torch
        if isinstance(inputs, torch.Tensor):
            return self._p.predict_tensor(inputs)
        if isinstance(inputs, (list, tuple)):
            return self._p.predict_many(list(inputs))
        return self._p.predict_one(inputs)

    def predict_split(self):
        """The answers for the data module's prediction split, in its order (what `kiln predict` writes)."""
        return self._p.predict_split()

    def generate(self, prompt=None, *, max_new_tokens: Optional[int] = None,
                 temperature: Optional[float] = None, top_k: Optional[int] = None,
                 top_p: Optional[float] = None, repetition_penalty: Optional[float] = None,
                 stop: Optional[Sequence[str]] = None, seed: Optional[int] = None):
        """A language model: `prompt` and its continuation (None: the task's own prompt). A list of
        prompts is generated together and gives a list. The options are kiln predict's task.* ones
        (None: the run's own); temperature 0 is greedy; the text ends before the first stop string."""
        if isinstance(stop, str):
            stop = [stop]
        return self._p.generate(prompt if prompt is None or isinstance(prompt, str) else list(prompt),
                                max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                                top_p=top_p, repetition_penalty=repetition_penalty,
                                stop=None if stop is None else list(stop), seed=seed)

    @property
    def generates(self) -> bool:
        """Whether the model continues prompts (generate) rather than answering inputs (predict)."""
        return self._p.generates

    @property
    def class_names(self):
        return self._p.class_names


def _save_model(model, output_dir: str) -> str:
    """model.pt in the run folder: torch.jit.script of a torch.nn.Module (or a ScriptModule as is)."""
    import os
    import torch
    if not isinstance(model, torch.nn.Module):
        raise TypeError("model= takes a torch.nn.Module, not %s" % type(model).__name__)
    import warnings
    try:
        with warnings.catch_warnings():
            # torch 2.11 marks torch.jit.script deprecated; it is still the one way to run a Python-defined
            # model's forward and backward from C++ without Python (docs/python.md).
            warnings.simplefilter("ignore", DeprecationWarning)
            scripted = model if isinstance(model, torch.jit.ScriptModule) else torch.jit.script(model)
    except Exception as e:
        raise KilnError("model=%s: torch.jit.script could not compile it (%s); kiln's loop runs the model as "
                        "TorchScript, without Python" % (type(model).__name__, str(e).splitlines()[0])) from e
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.abspath(os.path.join(output_dir, "model.pt"))
    scripted.save(path)
    return path


class Report:
    """kiln report's page of runs and sweeps: shown inline in Jupyter (an iframe holding the whole
    self-contained page), or written with .save(path)."""

    def __init__(self, html: str):
        self.html = html

    def save(self, path: str) -> str:
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.html)
        return path

    def _repr_html_(self):
        import html
        return ('<iframe srcdoc="%s" style="width:100%%;height:900px;border:0" sandbox="allow-scripts"></iframe>'
                % html.escape(self.html, quote=True))


def report(paths, title: Optional[str] = None) -> Report:
    """`kiln report PATHS` as an object a notebook shows inline: the runs' curves, tables, confusion
    matrices and the sweeps' charts. paths: a run or sweep folder, a folder of them, or a list."""
    import os
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [str(p) for p in paths]
    title = title or "kiln report: " + (paths[0] if len(paths) == 1 else "several folders")
    return Report(_report_html(paths, os.getcwd(), title))
