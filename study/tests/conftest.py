"""The study's analysis modules as fixtures, as its tests take them."""

import pytest

from study import crossing_fit as _crossing_fit
from study import lr_ratio as _lr_ratio
from study import lr_sensitivity as _lr_sensitivity
from study import optimum_drift as _optimum_drift
from study import seed_spread as _seed_spread
from study import start_lr as _start_lr


@pytest.fixture
def lr_ratio():
    return _lr_ratio


@pytest.fixture
def start_lr():
    return _start_lr


@pytest.fixture
def lr_sensitivity():
    return _lr_sensitivity


@pytest.fixture
def optimum_drift():
    return _optimum_drift


@pytest.fixture
def crossing_fit():
    return _crossing_fit


@pytest.fixture
def seed_spread():
    return _seed_spread
