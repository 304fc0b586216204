"""The ctxpress application, installed with `pip install 'ctxpress[server]'`: the chat service
(`server`), its web page (`web`), the local knowledge base (`kb`), the built-in offline model
(`models`), `doctor` and the `ctxpress` command line (`cli`).

Imports point down only: the application uses the library (`ctxpress`) and the tools
(`ctxpress.tools`); neither of them imports anything from here.
"""
