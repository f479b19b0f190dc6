"""The predict scenario: a cell's peak on a device model, from ckptlib.predict (nothing allocated)."""

from __future__ import annotations

from dataclasses import dataclass

from ckptlib import UnsupportedModeError
from ckptlib.units import GIB
from sweep.store.results import CellResult
from sweep.vocabulary import Status

from .common import build_kwargs, run_scenario


@dataclass(frozen=True)
class PredictSettings:
    device_model: str  # ckptlib.predict.DEVICE_MODELS
    card_bytes: int | None = None  # a predicted peak over this card is recorded as oom


def predict(cell, config, build, device_model: str):
    from ckptlib.predict import predict as predict_peak

    return predict_peak(build, config, device_model, **build_kwargs(cell))


def over_card(prediction, card_bytes: int) -> str:
    return (
        f"predicted peak {prediction.peak_bytes / GIB:.2f} GiB + {prediction.context_bytes / GIB:.2f} GiB context "
        f"exceeds the {card_bytes / GIB:.2f} GiB card"
    )


def predict_cell(fields: dict, settings: PredictSettings, progress=None) -> CellResult:
    """The cell's predicted peak on the device model; `oom` when it exceeds the card."""

    def scenario(cell, config, build, device):
        if cell.compile != "none":
            raise UnsupportedModeError(
                f"compile={cell.compile}: a prediction runs the eager step (FakeTensorMode); "
                "a compiled step's peak is measured, not predicted"
            )
        predicted = predict(cell, config, build, settings.device_model)
        fits = settings.card_bytes is None or predicted.fits(settings.card_bytes)
        return CellResult(
            Status.OK if fits else Status.OOM,
            reason=None if fits else over_card(predicted, settings.card_bytes),
            peak_bytes=predicted.peak_bytes,
            breakdown=predicted.breakdown,
            host_offload_peak_bytes=predicted.host_offload_bytes,
            report=predicted.report,
            plan=predicted.report.get("plans"),
            device_name=f"predicted: {settings.device_model}",
            timings={"predict_s": predicted.seconds},
        )

    return run_scenario(fields, scenario)
