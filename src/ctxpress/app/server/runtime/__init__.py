"""Runtime machinery: agents and their compiled graphs, checkpoints, workdirs, tools, the conversation
lock, the run event log, the run worker and executor, stream mapping, and the container wiring it all.

Import from the submodules (`ctxpress.app.server.runtime.locks`, …); this package stays import-light.
"""
