import pytest
from calc import add, mean, mul


def test_add() -> None:
    assert add(2, 3) == 5


def test_mul(numbers: list[float]) -> None:
    assert mul(numbers[1], numbers[2]) == 6


def test_mean_empty() -> None:
    with pytest.raises(ValueError):
        mean([])
