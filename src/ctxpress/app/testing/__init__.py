"""Helpers for exercising a running ctxpress service, shared by the test suites and the benchmarks.

Shipped with the application (like a web framework's test client) so that `tests/` and `bench/`
import it the ordinary way; it never imports pytest or anything under `tests/` or `bench/`.

- `ports`: a free TCP port on 127.0.0.1;
- `postgres`: a scratch PostgreSQL database, dropped on exit;
- `live_server`: the app under uvicorn in a thread of this process;
- `processes`: a service in a process of its own (start, SIGKILL, stop) and its users;
- `api`: small calls of the HTTP API and reading a run's SSE stream;
- `records`: reading and seeding the service's tables directly;
- `token_samples`, `real_tokenizers`: real text and real tokenizers for measuring the token estimator.
"""
