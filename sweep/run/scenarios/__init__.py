"""What a cell's child process runs: `measure_cell` (build, warm up, time the steps, read the
peaks) or `predict_cell` (the peak on the meta device, nothing allocated)."""

from .measure import MeasureSettings, measure_cell, timed_steps
from .predict import PredictSettings, predict_cell

__all__ = ["MeasureSettings", "PredictSettings", "measure_cell", "predict_cell", "timed_steps"]
