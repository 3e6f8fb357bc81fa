"""A few labelled workloads, each class with one or two of them: the nested cross-validation's
inner folds then hold one example per class, which StratifiedKFold refuses (a ValueError that
stopped `lucidctl simulate --profiles` with a traceback)."""

import numpy as np
import pandas as pd
import pytest

from models.packing import PackingModel


def _profiles(labels):
    n = len(labels)
    return pd.DataFrame({"gpu_util": np.linspace(10, 90, n), "gmem_util": np.linspace(5, 50, n),
                         "gmem": np.linspace(1000, 9000, n), "amp": [0] * n, "label": labels})


@pytest.mark.parametrize("labels", [[0, 0, 2, 2], [0, 0, 0, 1, 1], [0, 1, 1, 1], [0, 0, 1, 1, 2, 2]])
def test_few_labelled_workloads_fit(labels):
    m = PackingModel().fit(_profiles(labels))
    assert set(m.predict(_profiles(labels))) <= {0, 1, 2}
    ev = m.evaluation()
    assert ev["rows"] == len(labels) and 0.0 <= ev["nested_cv_accuracy"] <= 1.0
