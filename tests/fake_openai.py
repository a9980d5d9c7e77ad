"""The tests' one fake OpenAI-compatible server: POST .../chat/completions on 127.0.0.1, in a thread.
The `fake_openai` fixture (conftest.py) starts one per test.

- `answer`: the text it answers ("yes"); when the request asks for log-probabilities, the answer's
  log-probabilities are one token with `top_logprobs` from `top_logprobs` (by default "yes" at -0.2,
  "No" at -1.8; the first is the token chosen);
- `status`: the HTTP status it answers with (200); `script`: statuses to answer the next requests
  with, one each, before `status` applies again (e.g. [429, 503]);
- an error's body echoes the request's Authorization header, as some servers do, so a test can
  check that the key is scrubbed from what is recorded;
- `respond`: when set, a function of the request's JSON body that returns that request's answer, or
  (answer, top_logprobs), in place of `answer` (and `top_logprobs`): answers that differ by sample;
- `seen`: every request, as {"body": the JSON body, "auth": the Authorization header}.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable


class FakeOpenAI:
    def __init__(self) -> None:
        self.answer = "yes"
        self.top_logprobs = {"yes": -0.2, "No": -1.8}
        self.respond: Callable[[dict], str | tuple[str, dict]] | None = None
        self.status = 200
        self.script: list[int] = []
        self.seen: list[dict] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                auth = self.headers.get("Authorization")
                status, payload = fake._reply(body, auth)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def _reply(self, body: dict, auth: str | None) -> tuple[int, dict]:
        with self._lock:
            self.seen.append({"body": body, "auth": auth})
            status = self.script.pop(0) if self.script else self.status
        if status != 200:
            return status, {"error": {"message": f"the server failed (HTTP {status}); key {auth}", "type": "x"}}
        answer, top_logprobs = self.answer, self.top_logprobs
        if self.respond is not None:
            got = self.respond(body)
            answer, top_logprobs = got if isinstance(got, tuple) else (got, top_logprobs)
        logprobs = None
        if body.get("logprobs"):
            top = [{"token": t, "logprob": lp, "bytes": None} for t, lp in top_logprobs.items()]
            first = top[0] if top else {"token": answer, "logprob": 0.0, "bytes": None}
            logprobs = {"content": [{**first, "top_logprobs": top}]}
        return 200, {"id": "x", "object": "chat.completion", "created": 0, "model": body.get("model", "m"),
                     "choices": [{"index": 0, "finish_reason": "stop", "logprobs": logprobs,
                                  "message": {"role": "assistant", "content": answer}}],
                     "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
