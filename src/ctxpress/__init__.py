"""ctxpress: context compression for LangChain / LangGraph agents."""

from ctxpress.checkpoint_serde import CheckpointSerializer
from ctxpress.compaction import CompactionResult, compact_view
from ctxpress.config import CompressionConfig
from ctxpress.deepagents_drop_in import DeepAgentsCompressionMiddleware
from ctxpress.errors import CtxpressError
from ctxpress.manual import FailedPart, ManualCompressionError, ManualCompressionResult, compress_now
from ctxpress.middleware import ContextCompressionMiddleware
from ctxpress.pressure import RequestPressure, measure_request
from ctxpress.summary.conflict import SummarizerConflictError
from ctxpress.tokens import TokenCounter, count_request_tokens, estimate_tokens
from ctxpress.workdir import LocalWorkdir, Workdir

__all__ = [
    "CheckpointSerializer",
    "CompactionResult",
    "CompressionConfig",
    "ContextCompressionMiddleware",
    "CtxpressError",
    "DeepAgentsCompressionMiddleware",
    "FailedPart",
    "LocalWorkdir",
    "ManualCompressionError",
    "ManualCompressionResult",
    "RequestPressure",
    "SummarizerConflictError",
    "TokenCounter",
    "Workdir",
    "compact_view",
    "compress_now",
    "count_request_tokens",
    "estimate_tokens",
    "measure_request",
]
__version__ = "0.1.0"
