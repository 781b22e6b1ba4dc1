"""Second-order trust-region pieces, each a pure function tested against explicit matrices."""

from trustrl.trust.cg import CGResult, conjugate_gradient
from trustrl.trust.fisher import fisher_vector_product, flat_grad, mean_kl
from trustrl.trust.kl_control import AdaptiveKL
from trustrl.trust.line_search import LineSearchResult, backtracking_line_search

__all__ = [
    "AdaptiveKL", "CGResult", "LineSearchResult", "backtracking_line_search",
    "conjugate_gradient", "fisher_vector_product", "flat_grad", "mean_kl",
]
