import pytest


@pytest.fixture
def numbers() -> list[float]:
    return [1.0, 2.0, 3.0, 6.0]
