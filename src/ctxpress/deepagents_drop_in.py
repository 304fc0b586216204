"""ctxpress as DeepAgents' summarization: one middleware that `create_deep_agent` puts in its place.

`create_deep_agent` builds the main agent and its general-purpose `task` sub-agent with its own
`SummarizationMiddleware`, and replaces a core middleware in place by a caller's middleware of the
same `.name`. `DeepAgentsCompressionMiddleware` is `ContextCompressionMiddleware` under that name,
so passing it in `middleware=[...]` swaps DeepAgents' summariser for ctxpress in the main agent
and in the general-purpose sub-agent (which inherits a replacement of one of its default slots),
at the same position: after the filesystem and `task` middleware, whose tool schemas and system
prompt are then counted towards the threshold. A declarative sub-agent takes it in its own
`middleware` list. This module does not import DeepAgents.
"""

from __future__ import annotations

from ctxpress.middleware import ContextCompressionMiddleware

#: The `.name` under which DeepAgents registers its summarization middleware.
DEEPAGENTS_SUMMARIZATION_NAME = "SummarizationMiddleware"


class DeepAgentsCompressionMiddleware(ContextCompressionMiddleware):
    """`ContextCompressionMiddleware` that replaces DeepAgents' summarization in `create_deep_agent`."""

    @property
    def name(self) -> str:
        return DEEPAGENTS_SUMMARIZATION_NAME


__all__ = ["DEEPAGENTS_SUMMARIZATION_NAME", "DeepAgentsCompressionMiddleware"]
