"""kiln's data modules for PyTorch Lightning: `kiln.lightning.DataModule(cfg["data"])` is a
LightningDataModule whose dataloaders are kiln's loaders (batches are {"input", "target", ...}
dicts of torch.Tensors; each pass is the next epoch of kiln's seeded order).

    import pytorch_lightning as pl, kiln, kiln.lightning
    data = kiln.lightning.DataModule(kiln.compose(overrides=["experiment=fashion_mnist"])["data"], seed=1)
    pl.Trainer(max_epochs=1).fit(MyLightningModule(), datamodule=data)
"""
try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl

import kiln


class DataModule(pl.LightningDataModule):
    def __init__(self, cfg: dict, seed: int = 0):
        super().__init__()
        self.kiln = kiln.data_module(cfg, seed)

    @property
    def class_names(self):
        return self.kiln.class_names

    def train_dataloader(self):
        return self.kiln.train_loader()

    def val_dataloader(self):
        return self.kiln.val_loader()

    def test_dataloader(self):
        return self.kiln.test_loader()
