"""specviz: figures, explorables, analytic models and the CLI, all built on the engine's event stream."""

from .theory import expected_speedup, expected_tokens_per_round, optimal_gamma
from .views.chain import accepted_length_histogram, draft_depth_acceptance_figure, speedup_vs_gamma, token_stream_figure
from .views.tokens import token_stream_html

__all__ = ["accepted_length_histogram", "draft_depth_acceptance_figure", "expected_speedup",
           "expected_tokens_per_round", "optimal_gamma", "speedup_vs_gamma", "token_stream_figure", "token_stream_html"]
