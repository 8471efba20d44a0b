"""register_immutable: digests cached per object, encodings unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from memostore import memo, register_immutable
from memostore.values.hashcache import digest_cache
from memostore.values.hashing import digest_value


class Frozen(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(*[nn.Linear(4, 4) for _ in range(50)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def test_registered_module_keeps_its_encoding_and_caches_its_digest(store_dir: Path) -> None:
    torch.manual_seed(0)
    model = Frozen()
    before = digest_value(model)
    register_immutable(Frozen)
    fresh = Frozen()
    fresh.load_state_dict(model.state_dict())
    assert digest_value(fresh) == before  # same encoding as without registration
    assert digest_cache.get(fresh, ("immutable",)) == before

    @memo
    def predict(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return m(x)

    x = torch.ones(2, 4)
    first = predict(fresh, x)
    second = predict(fresh, x)
    assert torch.equal(first, second)
    restored = predict.lookup(fresh, x).load_args()["m"]
    assert isinstance(restored, Frozen)
    assert torch.equal(restored(x), fresh(x))


def test_inline_codec_types_cannot_be_registered() -> None:
    with pytest.raises(TypeError, match="inline"):
        register_immutable(torch.Tensor)
