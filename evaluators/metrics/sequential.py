"""Deciding with fewer items: power planning and group-sequential boundaries for the gate.
Pure numpy/scipy.

**Power planning.** A rule judged on ``n`` items by a one-sided test at level α, on a
statistic whose per-item standard deviation is σ (a paired difference's for a comparison
with the champion, the metric's own for a floor), has the standard error σ/√n and
detects a true distance Δ from its margin with probability Φ(Δ√n/σ − z₁₋α) (the
normal approximation of a one-sided z-test). Its minimum detectable effect at power
1 − β is (z₁₋α + z₁₋β)·σ/√n, and a margin Δ needs ⌈((z₁₋α + z₁₋β)·σ/Δ)²⌉ items.

**Group-sequential looks.** The items are evaluated in a seeded, stratified order and
the gate looks after fractions t₁ < … < t_K = 1 of them. At each look a rule's
standardised statistic Z_k — a comparison's paired score statistic (``score_test.py``), a
floor's (estimate − limit)/SE_k — is compared with a boundary c_k.
The boundaries spend the level α over the looks with Lan & DeMets' (1983) spending
function of O'Brien–Fleming type by default, α(t) = 2 − 2Φ(z₁₋α/₂/√t): almost nothing at early
looks (a decision there must be overwhelming), nearly the whole α at the last look, so
the last look's boundary is close to the fixed-sample one. Each boundary solves
P(Z₁ < c₁, …, Z_{k−1} < c_{k−1}, Z_k ≥ c_k) = α(t_k) − α(t_{k−1}) under the canonical
joint distribution of the Z_k (Jennison & Turnbull 2000, Group Sequential Methods, §3.1:
multivariate normal, Corr(Z_i, Z_j) = √(t_i/t_j) for t_i ≤ t_j), with the crossing
probabilities computed by their recursive numerical integration (§19.2). Spending
rather than fixed boundaries means the looks may fall at other fractions than planned
(a stratum running out, a shard lost) and the error rate still holds.

Why this design and not an anytime-valid confidence sequence (Waudby-Smith & Ramdas
2023): the looks are few and planned, the metrics are smooth functions of per-item
means (the canonical joint distribution holds for them asymptotically), and for a
handful of looks a spending design loses almost no power against the fixed-sample test
(its largest sample grows by about 2 % for four looks) where a confidence sequence is
markedly wider at the last look. A policy may choose the Pocock-type function (Lan &
DeMets' α₂*, ``spending: pocock``): it spends evenly, so clear failures stop sooner, and
leaves less for the last look, so a few more true failures end inconclusive.

**Many rules.** Stopping to reject needs one rule shown failing. Across the rules tested
the gate uses Holm's step-down with each step's level spent over the looks (the
group-sequential Holm procedure of Maurer & Bretz 2013, "Multiple testing in group
sequential trials using graphical approaches", equal weights): the j-th smallest p-value
(0-based) is held to the look's nominal level of the spending at α/(m − j).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from functools import lru_cache
from typing import Literal, TypeVar

import numpy as np
from scipy import integrate, optimize, special, stats

T = TypeVar("T")

#: the power a plan asks of every rule
DEFAULT_POWER = 0.8


def one_sided_z(alpha: float) -> float:
    """z₁₋α: the standard normal quantile a one-sided test at level α compares with."""
    return float(stats.norm.ppf(1 - alpha))


def minimum_detectable_effect(sd: float, n: int, alpha: float, power: float = DEFAULT_POWER) -> float:
    """The smallest true distance from a rule's margin that a one-sided z-test at level
    ``alpha`` on ``n`` items (per-item standard deviation ``sd``) detects with probability
    ``power``: (z₁₋α + z_power)·σ/√n (the one-sided test's power equation solved for Δ)."""
    if n < 1:
        return float("inf")
    return (one_sided_z(alpha) + float(stats.norm.ppf(power))) * sd / np.sqrt(n)


def items_needed(sd: float, effect: float, alpha: float, power: float = DEFAULT_POWER) -> int | None:
    """The items a one-sided z-test at level ``alpha`` needs to detect a true distance
    ``effect`` from its margin with probability ``power``: ⌈((z₁₋α + z_power)·σ/Δ)²⌉ (the
    power equation solved for n). None when ``effect`` is 0, or so small that the count
    overflows a double: no number of items detects it."""
    if effect <= 0:
        return None
    with np.errstate(over="ignore"):
        needed = np.ceil(np.square(np.float64((one_sided_z(alpha) + float(stats.norm.ppf(power))) * sd / effect)))
    return max(1, int(needed)) if np.isfinite(needed) else None


def obrien_fleming_spending(fraction: float, alpha: float) -> float:
    """The one-sided level spent by information fraction t: α(t) = 2 − 2Φ(z₁₋α/₂/√t)
    (Lan & DeMets 1983, the O'Brien–Fleming-type spending function α₁*; α(1) = α),
    computed as 2Φ̄(z₁₋α/₂/√t): 2 − 2Φ rounds to 0 beyond about 8 sd (t < 0.06 at α = 0.05)."""
    if fraction <= 0:
        return 0.0
    return float(2 * stats.norm.sf(stats.norm.isf(alpha / 2) / np.sqrt(min(fraction, 1.0))))


def pocock_spending(fraction: float, alpha: float) -> float:
    """The one-sided level spent by information fraction t: α(t) = α·ln(1 + (e − 1)·t)
    (Lan & DeMets 1983, the Pocock-type spending function α₂*; α(1) = α)."""
    if fraction <= 0:
        return 0.0
    return float(alpha * np.log1p((np.e - 1) * min(fraction, 1.0)))


#: The spending functions a policy may name (``sequential.spending``).
Spending = Literal["obrien-fleming", "pocock"]
SPENDING_FUNCTIONS: dict[str, Callable[[float, float], float]] = {"obrien-fleming": obrien_fleming_spending, "pocock": pocock_spending}


#: The most looks a sequential policy may have (``sequential.looks``). The boundaries exist
#: for any number; each look costs a validation a round of expectations, MLflow logging and
#: a gate decision, and the solver's time grows with the looks, where looks beyond a
#: handful save few further items.
MAX_LOOKS = 20

#: Points of the grid each look's density is carried on at least (odd: Simpson's panels of
#: three; 401 gives the nominal levels of 4,001 to within 1e-6), and how many standard
#: deviations of the score it reaches below 0 (with no lower boundary the score can go
#: anywhere below) and at most above (a boundary further up cuts the paths beyond it with
#: the grid). The mass beyond 9 sd is 1e-19: what a look's crossing probability can be off by.
GRID_POINTS = 401
GRID_LOWER_SD = 9.0
GRID_UPPER_SD = 9.0

#: The least fraction of the items between two looks. The grid a look's density is carried
#: on resolves the increment that led to it, in STEPS_PER_INCREMENT_SD points a standard
#: deviation (the density's edge at the previous boundary is that sharp), so its points grow
#: as 1/√gap: about 2,300 at this gap, where GRID_POINTS serve looks 0.03 or more apart.
MIN_LOOK_GAP = 0.001
STEPS_PER_INCREMENT_SD = 4

#: An increment whose sd spans this many grid steps or more (a look long after the one
#: before) is smooth on the grid: Simpson's rule integrates density × kernel there, where
#: the moments of :func:`_simpson_product` would cancel to rounding error. A narrower one is
#: integrated exactly against the density's quadratic interpolant, however narrow (looks
#: close together), which Simpson's rule on density × kernel would miss.
SMOOTH_KERNEL_STEPS = 50

_ROOT_TWO_PI = float(np.sqrt(2 * np.pi))


def _grid(upper: float, information: float, increment_sd: float = np.inf) -> np.ndarray:
    """The score's grid at a look: from −9 sd up to the boundary ``upper`` (+∞: 9 sd), in
    GRID_POINTS points or more, for a step of at most ``increment_sd``/STEPS_PER_INCREMENT_SD
    (the density there is the previous look's, cut at its boundary, smoothed by that increment)."""
    bottom, top = -GRID_LOWER_SD * np.sqrt(information), min(upper, GRID_UPPER_SD * np.sqrt(information))
    panels = max((GRID_POINTS - 1) // 2, int(np.ceil((top - bottom) * STEPS_PER_INCREMENT_SD / (2 * increment_sd))))
    return np.linspace(bottom, top, 2 * panels + 1)


def _smooth_on(grid: np.ndarray, step: float) -> bool:
    return step >= SMOOTH_KERNEL_STEPS * (grid[1] - grid[0])


def _simpson_product(moments: tuple[np.ndarray, np.ndarray, np.ndarray], offset: np.ndarray, grid: np.ndarray, density: np.ndarray) -> np.ndarray:
    """∫ p(s) K(s) ds over ``grid``, p Simpson's quadratic through ``density`` on each panel
    of three points and K integrated exactly against it (product integration): ``moments``
    are ν_j = ∫_panel (s − r)^j K(s) ds, j = 0, 1, 2, about a point r, ``offset`` r − the
    panel's middle (per panel, or rows × panels). Exact in the kernel however narrow, where
    Simpson's rule on p·K misses a normal kernel narrower than the grid's step."""
    zeroth, first, second = moments
    step = grid[1] - grid[0]
    # moments of x = (s − middle)/step, the Lagrange basis's variable on [−1, 1]
    x1 = (offset * zeroth + first) / step
    x2 = (offset * offset * zeroth + 2 * offset * first + second) / (step * step)
    return ((x2 - x1) / 2) @ density[0:-1:2] + (zeroth - x2) @ density[1::2] + ((x2 + x1) / 2) @ density[2::2]


def _crossing(bound: float, grid: np.ndarray, density: np.ndarray, step: float) -> float:
    """P(no earlier crossing, S_k ≥ ``bound``) = ∫ p(s) Φ((s − bound)/step) ds: ``density`` p
    the score's on ``grid`` after the previous look on the paths that crossed nothing,
    ``step`` the sd of the increment. For product integration, in w = (s − bound)/step,
    ∫wʲΦ(w)dw is wΦ + φ, ((w² − 1)Φ + wφ)/2 and (w³Φ + (w² + 2)φ)/3 for j = 0, 1, 2."""
    if _smooth_on(grid, step):
        return float(integrate.simpson(density * special.ndtr((grid - bound) / step), x=grid))
    w = (grid[::2] - bound) / step
    cdf, pdf = special.ndtr(w), np.exp(-w * w / 2) / _ROOT_TWO_PI
    antiderivatives = (w * cdf + pdf, ((w * w - 1) * cdf + w * pdf) / 2, (w**3 * cdf + (w * w + 2) * pdf) / 3)
    zeroth, first, second = (step ** (j + 1) * np.diff(a) for j, a in enumerate(antiderivatives))
    return float(_simpson_product((zeroth, first, second), bound - grid[1::2], grid, density))


def _moved_density(targets: np.ndarray, grid: np.ndarray, density: np.ndarray, step: float) -> np.ndarray:
    """The density at ``targets`` of the next look's score on the paths that crossed nothing
    yet: ∫ p(s) φ((y − s)/step)/step ds, the convolution with the increment's normal
    density. For product integration, in v = (s − y)/step, its moments about y are ΔΦ,
    −step·Δφ and step²·(ΔΦ − Δ(vφ))."""
    if _smooth_on(grid, step):
        kernel = stats.norm.pdf((targets[:, None] - grid[None, :]) / step) / step
        return np.asarray(integrate.simpson(kernel * density[None, :], x=grid, axis=1))
    v = (grid[None, ::2] - targets[:, None]) / step
    pdf = np.exp(-v * v / 2) / _ROOT_TWO_PI
    # above the mean, differences of upper tails: Φ's own would round them away
    zeroth = np.where(v[:, :-1] >= 0, -np.diff(special.ndtr(-v), axis=1), np.diff(special.ndtr(v), axis=1))
    moments = (zeroth, -step * np.diff(pdf, axis=1), step * step * (zeroth - np.diff(v * pdf, axis=1)))
    return np.asarray(_simpson_product(moments, targets[:, None] - grid[None, 1::2], grid, density))


def _excess_crossing(bound: float, grid: np.ndarray, density: np.ndarray, information: float, step: float, spent: float) -> float:
    """P(no earlier crossing, Z_k ≥ bound) − what look k spends: 0 at look k's boundary."""
    return _crossing(bound * np.sqrt(information), grid, density, step) - spent


@lru_cache(maxsize=256)
def _boundaries(fractions: tuple[float, ...], alpha: float, spending: Spending) -> tuple[float, ...]:
    """Jennison & Turnbull (2000) §19.2's recursive numerical integration on the score
    S_k = Z_k·√t_k, whose increments are independent N(0, t_k − t_{k−1}): the density of
    S_{k−1} on the paths that crossed no boundary is carried on a grid, a boundary is where
    its probability of crossing at look k equals what look k spends, α(t_k) − α(t_{k−1})
    (Lan & DeMets 1983), and the density moves on by convolution with the increment's.
    A look that spends nothing a double can hold (O'Brien–Fleming's α(t) underflows below
    t ≈ 0.003 at α = 0.05) has the boundary +∞: no path crosses there. Deterministic and
    milliseconds a look, where a quasi-Monte Carlo multivariate normal takes seconds."""
    spent_by = SPENDING_FUNCTIONS[spending]
    t = np.asarray(fractions, dtype=float)
    bounds = [float(stats.norm.isf(spent_by(t[0], alpha)))]
    grid = _grid(bounds[0] * np.sqrt(t[0]), t[0])
    density = stats.norm.pdf(grid, scale=np.sqrt(t[0]))
    for k in range(1, len(t)):
        spent = spent_by(t[k], alpha) - spent_by(t[k - 1], alpha)
        step = float(np.sqrt(t[k] - t[k - 1]))
        if spent <= 0:
            bounds.append(float("inf"))
        else:
            # at −1 the crossing probability is at least Φ̄(−1) − α(t_{k−1}) > what is spent
            # (α < 0.84); where Φ̄(c) < what is spent, no earlier crossing or not, it is below
            above = float(stats.norm.isf(spent)) + 1.0
            bounds.append(float(optimize.brentq(_excess_crossing, -1.0, above, args=(grid, density, t[k], step, spent), xtol=1e-10)))
        moved = _grid(bounds[-1] * np.sqrt(t[k]), t[k], step)
        density, grid = _moved_density(moved, grid, density, step), moved
    return tuple(bounds)


def spending_boundaries(fractions: Sequence[float], alpha: float, spending: Spending = "obrien-fleming") -> np.ndarray:
    """The boundaries c_1..c_K of the looks at information ``fractions`` (increasing, the
    last 1) spending one-sided ``alpha`` by the ``spending`` function: each solves
    P(Z_1 < c_1, …, Z_{k−1} < c_{k−1}, Z_k ≥ c_k) = α(t_k) − α(t_{k−1}) under the canonical
    joint distribution. ValueError for an ``alpha`` outside (0, 0.5)."""
    t = validated_fractions(fractions)
    if not 0 < alpha < 0.5:
        raise ValueError(f"a one-sided level must be within (0, 0.5), got {alpha}")
    return np.asarray(_boundaries(tuple(float(f) for f in t), float(alpha), spending))


def nominal_levels(fractions: Sequence[float], alpha: float, spending: Spending = "obrien-fleming") -> np.ndarray:
    """Each look's nominal one-sided level 1 − Φ(c_k): a test at look k rejects when its
    p-value is at most this."""
    return np.asarray(stats.norm.sf(spending_boundaries(fractions, alpha, spending)))


def pass_level(fractions: Sequence[float], alpha: float, look: int, promote_early: bool, spending: Spending = "obrien-fleming") -> float:
    """The nominal level at which a rule passes at look ``look``: the spending's where any
    look may promote; where only the last may, the whole α there. A design that promotes at
    the last look alone makes one test of passing, and its early looks, which only ever
    stop to reject, can only lower that test's error: spending its α over them would cost
    power for nothing."""
    if not promote_early and look == len(fractions) - 1:
        return float(alpha)
    return float(nominal_levels(fractions, alpha, spending)[look])


def t_boundary(nominal_level: float, items: int) -> float:
    """A look's boundary for a studentised statistic on ``items`` items: the Student t
    quantile with n − 1 degrees of freedom at the look's nominal level. The boundaries
    assume a known standard error; with one estimated from few items (an early look) the
    z boundary lets through more than the level spent, the t boundary does not."""
    return float(stats.t.isf(nominal_level, df=max(items - 1, 1)))


def validated_fractions(fractions: Sequence[float]) -> np.ndarray:
    """Look fractions as an array; ValueError unless they increase within (0, 1], each at
    least :data:`MIN_LOOK_GAP` after the one before, and end at 1 (to rounding: the last is
    then 1 exactly, every item)."""
    t = np.asarray(list(fractions), dtype=float)
    if t.size == 0 or t[0] <= 0 or np.any(np.diff(t) <= 0) or not np.isclose(t[-1], 1.0) or (t.size > 1 and t[-2] >= 1):
        raise ValueError(f"looks must increase strictly within (0, 1] and end at 1, got {list(fractions)}")
    t[-1] = 1.0
    if np.any(np.diff(t) < MIN_LOOK_GAP * (1 - 1e-9)):
        raise ValueError(f"looks must be at least {MIN_LOOK_GAP:g} of the items apart, got {list(fractions)}")
    return t


def sequential_holm(p_values: Sequence[float], alpha: float, fractions: Sequence[float], look: int, spending: Spending = "obrien-fleming") -> np.ndarray:
    """Which of m hypotheses Holm's step-down rejects at look ``look`` (0-based) of a
    design with looks at ``fractions``: the j-th smallest p-value (0-based) against the
    look's nominal level of the spending at α/(m − j), stopping at the first that is not
    below it (Maurer & Bretz 2013, Holm's weights). At the last look of a one-look design
    this is Holm's procedure itself."""
    p = np.asarray(p_values, dtype=float)
    rejected = np.zeros(p.size, dtype=bool)
    for step, index in enumerate(np.argsort(p, kind="stable")):
        level = nominal_levels(fractions, alpha / (p.size - step), spending)[look]
        if not p[index] <= level:
            break
        rejected[index] = True
    return rejected


def stratified_order(ids: Sequence[T], strata: Sequence[Hashable], seed: int) -> list[T]:
    """A seeded random order of ``ids`` in which every prefix holds each stratum in its
    share of the whole, to within one item (systematic allocation): each stratum's items
    are shuffled and spread evenly over the order, at positions (i + u_s)/n_s for its i-th
    item with a random offset u_s per stratum, ties broken at random. So the first quarter
    of the items is a fair sample of the whole for every look."""
    if len(ids) != len(strata):
        raise ValueError(f"{len(ids)} ids but {len(strata)} strata")
    rng = np.random.default_rng(seed)
    members: dict[Hashable, list[int]] = {}
    for position, stratum in enumerate(strata):
        members.setdefault(stratum, []).append(position)
    keys = np.empty(len(ids))
    for stratum in sorted(members, key=str):
        positions = np.asarray(members[stratum])[rng.permutation(len(members[stratum]))]
        keys[positions] = (np.arange(len(positions)) + rng.uniform()) / len(positions)
    tie_break = rng.permutation(len(ids))
    return [ids[i] for i in np.lexsort((tie_break, keys))]


# --- one rule's decision over the looks -------------------------------------------------------------

#: a rule's state after a look: decided either way, or not yet
PASS, FAIL, CONTINUE, INCONCLUSIVE = "pass", "fail", "continue", "inconclusive"


def standardised(improvement: np.ndarray | float, margin: float, standard_error: np.ndarray | float) -> np.ndarray:
    """Z = (improvement − margin)/SE: how many standard errors the estimate sits above the
    rule's margin (positive: on the passing side). With no spread at all (every item the
    same difference) the side is certain: ±∞, NaN on the margin itself; NaN where the
    standard error is undefined."""
    gap = np.asarray(improvement, dtype=float) - margin
    error = np.asarray(standard_error, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = gap / error
        certain = np.where(gap == 0, np.nan, np.sign(gap) * np.inf)
    return np.where(error > 0, z, np.where(error == 0, certain, np.nan))


def look_verdicts(z: np.ndarray, fail_boundary: float, pass_boundary: float, last: bool, promote_early: bool) -> np.ndarray:
    """One look's verdict of each Z: fail when Z ≤ −``fail_boundary`` (shown on the wrong
    side of the margin), pass when Z ≥ ``pass_boundary`` at the last look (or at any look
    where the policy promotes early), else continue — inconclusive at the last look. An
    undefined Z (too few items to estimate a spread) decides nothing before the last look."""
    z = np.asarray(z, dtype=float)
    passing = (z >= pass_boundary) & (last or promote_early)
    verdict = np.where(z <= -fail_boundary, FAIL, np.where(passing, PASS, INCONCLUSIVE if last else CONTINUE))
    return verdict.astype(object)


def sequential_decisions(
    z_at_looks: np.ndarray, sizes: Sequence[int], fractions: Sequence[float], alpha: float, promote_early: bool,
    p_values: tuple[np.ndarray, np.ndarray] | None = None, spending: Spending = "obrien-fleming",
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Each row of studentised statistics at the looks (decisions × looks, ``sizes`` items
    at each) judged as the gate judges one rule: fail at one-sided ``alpha`` spent over the
    looks, pass at :func:`pass_level`, on t boundaries (:func:`t_boundary`); the first look
    that decides stops it. ``p_values``: each decision's p-values of failing and of passing
    at each look (decisions × looks), which a comparison with the champion is judged by
    (the paired score test: ``score_test.paired_score_p_values``) in place of its t
    statistic. Returns each decision's verdict and the look (0-based) it stopped at. With
    one look at 1 this is the fixed-sample test."""
    z = np.atleast_2d(np.asarray(z_at_looks, dtype=float))
    levels = nominal_levels(fractions, alpha, spending)
    verdict = np.full(z.shape[0], CONTINUE, dtype=object)
    stopped = np.full(z.shape[0], len(levels) - 1)
    for look, (level, items) in enumerate(zip(levels, sizes, strict=True)):
        open_ = verdict == CONTINUE
        last = look == len(levels) - 1
        passing = pass_level(fractions, alpha, look, promote_early, spending)
        if p_values is not None:
            p_fail, p_pass = (np.atleast_2d(np.asarray(p, dtype=float))[open_, look] for p in p_values)
            may_pass = (p_pass <= passing) & (last or promote_early)
            now = np.where(p_fail <= level, FAIL, np.where(may_pass, PASS, INCONCLUSIVE if last else CONTINUE)).astype(object)
        else:
            now = look_verdicts(z[open_, look], t_boundary(level, items), t_boundary(passing, items), last=last, promote_early=promote_early)
        verdict[open_] = now
        stopped[np.flatnonzero(open_)[now != CONTINUE]] = look
    return verdict, stopped


def items_at(fraction: float, n: int) -> int:
    """The items a look at ``fraction`` judges of ``n``: ⌈t·n⌉ (at least one; all at t = 1)."""
    return n if fraction >= 1 else max(1, min(n, int(np.ceil(fraction * n - 1e-9))))


def look_sizes(n: int, fractions: Sequence[float]) -> np.ndarray:
    """The items judged at each look of ``n`` (:func:`items_at`)."""
    return np.asarray([items_at(float(t), n) for t in validated_fractions(fractions)])


def paired_z_at_looks(differences: np.ndarray, margin: float, fractions: Sequence[float]) -> np.ndarray:
    """Z at each look of per-item paired improvements (decisions × items, in evaluation
    order): the prefix's mean against the margin over its standard error s/√n — the
    standard error the gate's jackknife gives a mean metric (exactly)."""
    d = np.atleast_2d(np.asarray(differences, dtype=float))
    columns = []
    for size in look_sizes(d.shape[1], fractions):
        prefix = d[:, :size]
        se = prefix.std(axis=1, ddof=1) / np.sqrt(size) if size > 1 else np.full(d.shape[0], np.nan)
        columns.append(standardised(prefix.mean(axis=1), margin, se))
    return np.stack(columns, axis=1)
