import { createReadStream } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import type { JsonObject } from "@bufbuild/protobuf";
import { sendJson, type NodeRequest, type NodeResponse } from "../node-http.js";

// GET /openapi.json and GET /docs: the document, and Swagger UI from the pinned swagger-ui-dist
// package, served from this process (the page fetches nothing from any other host).

const UI_DIR = dirname(createRequire(import.meta.url).resolve("swagger-ui-dist/package.json"));

/** The package files the page loads, with their content types; nothing else under /docs/ is served. */
const UI_ASSETS: Record<string, string> = {
  "swagger-ui.css": "text/css; charset=utf-8",
  "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
  "favicon-32x32.png": "image/png",
};

// validatorUrl: null keeps the page from sending the document to an online validator.
const INITIALIZER = `window.onload = () => {
  window.ui = SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: null,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
  });
};
`;

const PAGE = `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>API docs</title>
  <link rel="stylesheet" href="/docs/swagger-ui.css">
  <link rel="icon" type="image/png" href="/docs/favicon-32x32.png">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="/docs/swagger-ui-bundle.js"></script>
  <script src="/docs/initializer.js"></script>
</body>
</html>
`;

/** Answers the docs paths and returns true, or returns false for any other path. */
export function createDocsHandler(document: JsonObject): (req: NodeRequest, res: NodeResponse, path: string) => boolean {
  const json = JSON.stringify(document);
  return (req, res, path) => {
    if (path !== "/openapi.json" && path !== "/docs" && !path.startsWith("/docs/")) return false;
    if (req.method !== "GET" && req.method !== "HEAD") {
      sendJson(res, 405, { detail: `method ${req.method} not allowed on ${path}` }, { allow: "GET, HEAD" });
      return true;
    }
    if (path === "/openapi.json") return send(res, "application/json; charset=utf-8", json);
    if (path === "/docs" || path === "/docs/") return send(res, "text/html; charset=utf-8", PAGE);
    if (path === "/docs/initializer.js") return send(res, "text/javascript; charset=utf-8", INITIALIZER);
    const name = path.slice("/docs/".length);
    const type = UI_ASSETS[name];
    if (type === undefined) {
      sendJson(res, 404, { detail: `no route for GET ${path}` });
      return true;
    }
    res.writeHead(200, { "content-type": type, "cache-control": "public, max-age=3600" });
    createReadStream(join(UI_DIR, name))
      .on("error", () => res.destroy())
      .pipe(res);
    return true;
  };
}

function send(res: NodeResponse, type: string, body: string): true {
  res.writeHead(200, { "content-type": type, "content-length": Buffer.byteLength(body) });
  res.end(body);
  return true;
}
