"""Bridge sampling and stepping stones (ppl_loo.numerics.bridge) against closed forms.

For ``p_a = N(0, 1)`` and ``l(theta) = N(y | theta, s^2)`` the tilted ``p_b ~ p_a l`` is Gaussian and
``log Z_b / Z_a = log N(y | 0, 1 + s^2)``: exactly the LOO predictive density of a conjugate
normal-mean model, with iid draws of both ends.
"""

import numpy as np
import pytest
from scipy.stats import norm

from ppl_loo.numerics.bridge import bridge_log_ratio, effective_size, log_mean_exp, stepping_stones


def _ends(y, s, n, rng, chains=4):
    vb = 1.0 / (1.0 + 1.0 / s**2)
    mb = vb * y / s**2
    a = rng.normal(size=(chains, n // chains))
    b = rng.normal(mb, np.sqrt(vb), size=(chains, n // chains))
    return norm.logpdf(y, a, s), norm.logpdf(y, b, s), norm.logpdf(y, 0.0, np.sqrt(1 + s**2))


@pytest.mark.parametrize("y, s", [(0.5, 1.0), (4.0, 0.3)])
def test_bridge_matches_closed_form_with_honest_error(y, s):
    rng = np.random.default_rng(0)
    z = []
    for _ in range(40):
        la, lb, truth = _ends(y, s, 4000, rng)
        est = bridge_log_ratio(la, lb)
        z.append((est.log_ratio - truth) / est.mcse)
    z = np.asarray(z)
    assert abs(np.mean(z)) < 0.6  # unbiased: the mean of 40 z-scores has sd 0.16
    assert 0.6 < np.std(z) < 1.5  # the MCSE is the size of the error


def test_bridge_beats_the_refit_alone_when_the_likelihood_spans_orders_of_magnitude():
    """y = 4, s = 0.3: l spans e^90 over the refit draws; their mean alone is off by about a nat
    (root mean square; the estimate the truth suite must not use), the bridge by a quarter of that."""
    rng = np.random.default_rng(1)
    naive_err, bridge_err = [], []
    for _ in range(20):
        la, lb, truth = _ends(4.0, 0.3, 4000, rng)
        naive_err.append(log_mean_exp(la) - truth)
        bridge_err.append(bridge_log_ratio(la, lb).log_ratio - truth)
    rms = lambda e: np.sqrt(np.mean(np.square(e)))  # noqa: E731
    assert rms(naive_err) > 0.5
    assert abs(np.mean(bridge_err)) < 0.15
    assert rms(bridge_err) < 0.5 * rms(naive_err)


def test_limits_are_the_one_sided_estimators():
    """With almost all draws on one side the bridge tends to that side's estimator."""
    rng = np.random.default_rng(2)
    la, lb, _ = _ends(1.0, 0.8, 4000, rng)
    only_a = bridge_log_ratio(la, lb[:, :1])  # 4 draws of p_b against 4000 of p_a
    assert abs(only_a.log_ratio - log_mean_exp(la)) < 0.01
    only_b = bridge_log_ratio(la[:, :1], lb)
    assert abs(only_b.log_ratio + log_mean_exp(-lb)) < 0.01


def test_stepping_stones_recover_the_ratio_where_the_ends_do_not_overlap():
    """y = 8, s = 0.2: the two ends share no draws and the bridge alone fails; a ladder of tempered
    Gaussians ``p_a l^beta`` (exact draws at each rung) gets the ratio within its error."""
    rng = np.random.default_rng(3)
    y, s = 8.0, 0.2
    truth = norm.logpdf(y, 0.0, np.sqrt(1 + s**2))
    betas = np.concatenate([[0.0], np.geomspace(1e-3, 1.0, 30)])
    rungs = []
    for b in betas:
        prec = 1.0 + b / s**2
        mean = b * y / s**2 / prec
        rungs.append(norm.logpdf(y, rng.normal(mean, 1 / np.sqrt(prec), size=(4, 1000)), s))
    est = stepping_stones(rungs, betas)
    assert abs(est.log_ratio - truth) < 4 * est.mcse + 0.05
    direct = bridge_log_ratio(rungs[0], rungs[-1])
    assert abs(direct.log_ratio - truth) > 5.0


def test_effective_size_sees_autocorrelation():
    rng = np.random.default_rng(4)
    iid = rng.normal(size=(4, 1000))
    ar = np.zeros((4, 1000))
    for t in range(1, 1000):
        ar[:, t] = 0.95 * ar[:, t - 1] + rng.normal(size=4)
    assert effective_size(iid) > 2500
    assert effective_size(ar) < 400


@pytest.mark.parametrize("bad, msg", [(np.array([np.nan, 0.0, 1.0]), "NaN"), (np.zeros((2, 2, 2)), "shape"),
                                      (np.array([1.0]), "at least 2")])
def test_bad_input_names_the_argument(bad, msg):
    with pytest.raises(ValueError, match="log_l_a") as err:
        bridge_log_ratio(bad, np.zeros(10))
    assert msg in str(err.value)
    with pytest.raises(ValueError, match="betas must increase"):
        stepping_stones([np.zeros(10)] * 2, [0.0, 0.5])
