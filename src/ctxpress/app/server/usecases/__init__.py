"""Use cases: what a route asks of the service — auth, conversations, run intake, manual compression,
usage, pressure, files. They work through repositories and the runtime (`ctxpress.app.server.runtime`).

Import from the submodules (`ctxpress.app.server.usecases.runs`, …); this package stays import-light.
"""
