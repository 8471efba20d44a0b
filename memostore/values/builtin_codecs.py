"""The codecs memostore ships besides torch's: importing this module registers them.

numpy arrays, loggers, ``@memo(files=...)`` paths, and the values of libraries
known by type name (Hugging Face datasets and tokenizers, OmegaConf, pandas),
whose packages are imported only when such a value is met. ``import memostore``
stays cheap; whatever decodes or encodes imports this first.
"""

from __future__ import annotations

from . import (  # noqa: F401
    hf_datasets,
    hf_tokenizers,
    loggers,
    numpy_codec,
    omegaconf_codec,
    pandas_codec,
    paths,
)
