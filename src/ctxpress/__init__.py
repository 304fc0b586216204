"""ctxpress: context compression for LangChain / LangGraph agents."""

from ctxpress.compaction import CompactionResult, compact_view
from ctxpress.config import CompressionConfig
from ctxpress.middleware import ContextCompressionMiddleware
from ctxpress.tokens import count_request_tokens, estimate_tokens
from ctxpress.workdir import LocalWorkdir, Workdir

__all__ = [
    "CompactionResult",
    "CompressionConfig",
    "ContextCompressionMiddleware",
    "LocalWorkdir",
    "Workdir",
    "compact_view",
    "count_request_tokens",
    "estimate_tokens",
]
__version__ = "0.1.0"
