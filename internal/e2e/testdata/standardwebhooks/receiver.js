// A webhook receiver for ferry's end-to-end tests that verifies every
// request with the official Standard Webhooks package for Node.js, as a
// receiver written in JavaScript would.
//
// RECEIVER_SECRETS is a JSON object from a request path to the secret that
// path holds: "whsec_…" (the standard form) or raw. Each request is answered
// 204 when the package verifies it with that path's secret and 401 when it
// does not (404 for an unknown path), and printed as one JSON line:
// {"path", "id" (webhook-id), "ok", "error"}. The first line printed is
// {"listening": PORT}.
"use strict";

const http = require("node:http");
const { Webhook } = require("standardwebhooks");

const hooks = {};
for (const [path, secret] of Object.entries(JSON.parse(process.env.RECEIVER_SECRETS))) {
  hooks[path] = secret.startsWith(Webhook.prefix) ? new Webhook(secret) : new Webhook(secret, { format: "raw" });
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const hook = hooks[req.url];
    let ok = false;
    let error = "";
    if (!hook) {
      error = "no such path";
    } else {
      try {
        hook.verify(Buffer.concat(chunks), req.headers);
        ok = true;
      } catch (e) {
        error = String((e && e.message) || e);
      }
    }
    process.stdout.write(JSON.stringify({ path: req.url, id: req.headers["webhook-id"] || "", ok, error }) + "\n");
    res.writeHead(ok ? 204 : hook ? 401 : 404);
    res.end();
  });
});

server.listen(0, "127.0.0.1", () => {
  process.stdout.write(JSON.stringify({ listening: server.address().port }) + "\n");
});
