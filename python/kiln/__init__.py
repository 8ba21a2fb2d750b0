"""kiln from Python: kiln's configs (Hydra 1.3's composition and override grammar) and its native
training loop, on the torch of this environment.

    import kiln
    cfg = kiln.compose(overrides=["experiment=fashion_mnist"])      # a dict
    metrics = kiln.fit(["experiment=fashion_mnist", "trainer.max_epochs=1"])

Errors in a config, an override or a file raise kiln.KilnError (a ValueError) with kiln's one-line
message (file:line, did-you-mean). docs/python.md says more.
"""
from typing import Dict, Optional, Sequence

from ._kiln import DataModule, KilnError, Job, LoopState, __version__, default_config_dir
from ._kiln import compose as _compose

__all__ = ["Callback", "KilnError", "LoopState", "Trainer", "compose", "data_module", "fit", "__version__"]


class Callback:
    """A callback in Python, called from kiln's loop at Lightning's hooks. Override the hooks you need;
    `trainer` is a kiln.LoopState (global_step, current_epoch, callback_metrics, request_stop()).
    An exception stops the run and is raised from the kiln call (fit, test, ...) as it was."""

    def on_fit_start(self, trainer: LoopState) -> None: ...
    def on_fit_end(self, trainer: LoopState) -> None: ...
    def on_train_epoch_start(self, trainer: LoopState) -> None: ...
    def on_train_epoch_end(self, trainer: LoopState) -> None: ...
    def on_train_batch_end(self, trainer: LoopState, loss: float) -> None: ...
    def on_validation_start(self, trainer: LoopState) -> None: ...
    def on_validation_end(self, trainer: LoopState, metrics: Dict[str, float]) -> None: ...
    def on_test_end(self, trainer: LoopState, metrics: Dict[str, float]) -> None: ...


_HOOKS = [name for name in vars(Callback) if name.startswith("on_")]


def _add_callbacks(job, callbacks):
    for callback in callbacks:
        if not isinstance(callback, Callback):
            raise TypeError("kiln callbacks derive from kiln.Callback, not %s" % type(callback).__name__)
        hooks = {h for h in _HOOKS if getattr(type(callback), h) is not getattr(Callback, h)}
        job.add_callback(callback, hooks)


def compose(config_name: str = "train", overrides: Sequence[str] = (), config_dir: Optional[str] = None) -> dict:
    """The config `kiln train OVERRIDES` would run, composed and resolved, as nested dicts and lists.

    paths.output_dir is the run folder hydra.run.dir names (not created)."""
    return _compose(config_name, list(overrides), config_dir or "")


class Trainer:
    """kiln's trainer on a job: `Trainer(overrides=[...])` composes as `kiln train` does (the run folder
    and its .hydra files are written), `Trainer(cfg)` takes a composed config (a dict from
    kiln.compose, perhaps changed) and writes into cfg["paths"]["output_dir"] (or output_dir)."""

    def __init__(self, cfg: Optional[dict] = None, *, overrides: Sequence[str] = (), output_dir: Optional[str] = None,
                 config_name: str = "train", config_dir: Optional[str] = None, evaluate: bool = False,
                 callbacks: Sequence[Callback] = ()):
        if cfg is not None and overrides:
            raise ValueError("kiln.Trainer takes a config or overrides, not both")
        if cfg is None:
            self._job = Job.from_overrides(list(overrides), config_name, config_dir or "", evaluate)
        else:
            if output_dir is None:
                output_dir = (cfg.get("paths") or {}).get("output_dir") or (cfg.get("trainer") or {}).get("default_root_dir")
            if not output_dir:
                raise ValueError("kiln.Trainer(cfg): the config has no paths.output_dir; pass output_dir=")
            self._job = Job.from_dict(cfg, str(output_dir), evaluate)
        _add_callbacks(self._job, callbacks)

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


def fit(overrides: Sequence[str] = (), config_name: str = "train", config_dir: Optional[str] = None,
        callbacks: Sequence[Callback] = ()) -> Dict[str, float]:
    """`kiln train OVERRIDES` in one call: fits, then tests the best checkpoint (unless the config says
    test: false). Returns the test metrics ({} without a test)."""
    trainer = Trainer(overrides=overrides, config_name=config_name, config_dir=config_dir, callbacks=callbacks)
    return trainer._job.fit_then_test()


def data_module(cfg: dict, seed: int = 0) -> DataModule:
    """kiln's data module of a config node (cfg["data"] of kiln.compose), with train_loader(),
    val_loader() and test_loader(): iterables of {"input", "target", ...} torch.Tensors, loaded by
    kiln's threads outside the GIL with kiln's per-sample seeded randomness."""
    return DataModule(cfg, seed)
