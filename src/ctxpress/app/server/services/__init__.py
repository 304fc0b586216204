"""Service layer: intake and the conversation lock, the run worker, streaming, usage, agents, files, auth.

Import from the submodules (`ctxpress.app.server.services.locks`, …); this package stays import-light.
"""
