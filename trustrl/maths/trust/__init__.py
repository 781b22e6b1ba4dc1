"""Second-order trust-region pieces, each a pure function tested against explicit matrices."""

from trustrl.maths.trust.cg import CGResult, conjugate_gradient
from trustrl.maths.trust.fisher import fisher_vector_product, flat_grad, mean_kl
from trustrl.maths.trust.kl_control import AdaptiveKL
from trustrl.maths.trust.line_search import LineSearchResult, backtracking_line_search

__all__ = [
    "AdaptiveKL", "CGResult", "LineSearchResult", "backtracking_line_search",
    "conjugate_gradient", "fisher_vector_product", "flat_grad", "mean_kl",
]
