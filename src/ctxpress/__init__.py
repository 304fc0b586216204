"""ctxpress: context compression for LangChain / LangGraph agents."""

from ctxpress.config import CompressionConfig
from ctxpress.tokens import count_request_tokens, estimate_tokens

__all__ = ["CompressionConfig", "count_request_tokens", "estimate_tokens"]
__version__ = "0.1.0"
