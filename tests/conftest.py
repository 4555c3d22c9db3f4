"""Shared test set-up: tests run on a few shared CPU cores, so torch uses one thread."""

import torch

torch.set_num_threads(1)
