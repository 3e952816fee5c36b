"""SFP's messages: a pass's request (fragments or whole words) and the summed sketch statistics."""

from __future__ import annotations

import numpy as np

from ...data.items import ItemCodec
from ...oracles.sketches import SketchOracle
from ..base import Request, SummedResponse
from ..messages import array_field, message, scalar_field
from .encoding import FragmentCodec, sketch
from .parameters import HASH_VALUES


@message
class SFPRequest(Request):
    """Send your fragment report and your word report (every public parameter a device needs)."""

    fragment_length: int = scalar_field(minimum=1)  # f: symbols per fragment
    oracle: str  # cms | hcms: the sketch of both reports
    fragment_epsilon: float = scalar_field(minimum=0.0)  # ε of the fragment report
    word_epsilon: float = scalar_field(minimum=0.0)  # 0: no full-word report
    sketch_rows: int = scalar_field(minimum=1)  # the sketches' rows
    sketch_width: int = scalar_field(minimum=2)  # the sketches' width
    position_seed: int  # public seed of the users' fragment positions
    oracle_seed: int  # the sketches' seed
    hash_seed: int  # key of the 8-bit word hash

    def fragment_codec(self, codec: ItemCodec) -> FragmentCodec:
        return FragmentCodec(codec, self.fragment_length, self.hash_seed)

    def fragment_oracle(self, codec: ItemCodec) -> SketchOracle:
        domain = self.fragment_codec(codec).fragment_values * HASH_VALUES
        return sketch(self.oracle, self.fragment_epsilon, domain, self.sketch_rows, self.sketch_width, self.oracle_seed)

    def word_oracle(self) -> SketchOracle:
        return sketch(self.oracle, self.word_epsilon, 1 << 64, self.sketch_rows, self.sketch_width, self.oracle_seed)


def flat_cells(oracle: SketchOracle) -> int:
    """The cells of a sketch's flat statistics (the server refuses, when it is built, a sketch without)."""
    cells = oracle.flat_size()
    if cells is None:
        raise ValueError(f"{oracle.name}: {oracle.rows} rows of {oracle.width} columns have no flat form")
    return cells


@message
class SFPResponse(SummedResponse):
    """The two sketches' flat statistics, the fragments' per position; additive."""

    # [position, flat cells] of the fragment sketch (signed for hcms)
    fragment_counts: np.ndarray = array_field("int64", ("P", "F"), minimum=None)
    fragment_reporters: np.ndarray = array_field("int64", ("P", "R"))  # [position, sketch row] reports
    # flat cells of the word sketch (empty: no word report)
    word_counts: np.ndarray = array_field("int64", ("W",), minimum=None)
    word_reporters: np.ndarray = array_field("int64", ("V",))  # reports per sketch row of the word sketch
