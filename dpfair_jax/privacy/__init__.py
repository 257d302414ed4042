"""dpfair_jax.privacy: sensitivities, clipping, noise, sampling and ledgers (the kit's one owner
of privacy arithmetic)."""

from .relations import (  # noqa: F401
    ADD_REMOVE,
    REPLACE_ONE,
    NeighboringRelation,
    Sensitivity,
    as_relation,
    bounded_sum_sensitivity,
    clipped_sum_sensitivity,
    count_sensitivity,
    gram_sensitivity,
    histogram_sensitivity,
    relation_name,
    replace_factor,
)
from .mechanisms import (  # noqa: F401
    add_gaussian,
    add_laplace,
    gaussian_mechanism,
    gaussian_noise,
    laplace_mechanism,
    laplace_noise,
)
from .selection import RandomStopping, SelectionResult, calibrate_for_selection, random_stopping_search, select_nonprivate, selection_epsilon  # noqa: F401
from .bounding import clip_to_interval, clip_to_norm, norm_clip_divisor  # noqa: F401
