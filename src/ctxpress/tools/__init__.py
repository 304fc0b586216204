"""Tools around the library: importing recorded agent conversations (`traces`), replaying them
through the middleware (`replay`) and the replay report (`replay_report`).

They need nothing beyond the library's own dependencies; they import the library and never the
application (`ctxpress.app`).
"""
