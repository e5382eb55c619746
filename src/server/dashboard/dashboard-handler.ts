import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";
import { sendJson, type NodeRequest, type NodeResponse } from "../node-http.js";

// GET /dashboard: the service's own web page (SPEC.md section 5). One HTML shell answers every
// deep link (/dashboard, /dashboard/endpoints/{name}, /dashboard/keys, /dashboard/indexing); its scripts, styles
// and the chart library (uPlot, pinned in package.json) are served from here under
// /dashboard/assets/. The page and its assets hold no data: they load without a token, and every
// data call the page makes to the API carries one. Files are read and gzipped once, at start.

// Beside this module: in src/ when run from the sources, in dist/ when built (npm run build copies them).
const ASSETS_DIR = join(dirname(fileURLToPath(import.meta.url)), "assets");
const UPLOT_DIR = join(dirname(createRequire(import.meta.url).resolve("uplot/package.json")), "dist");

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
};

/** The page's own modules and styles, and uPlot's two files: nothing else is served. */
const PAGE_FILES = ["dashboard.css", "app.js", "api.js", "format.js", "charts.js", "fleet.js", "fleet-markets.js", "endpoint.js", "key-usage.js", "keys.js", "indexing.js"];
const LIBRARY_FILES = ["uPlot.iife.min.js", "uPlot.min.css"];

interface Asset {
  type: string;
  body: Buffer;
  gzip: Buffer;
}

function asset(path: string): Asset {
  const body = readFileSync(path);
  return { type: TYPES[path.slice(path.lastIndexOf("."))]!, body, gzip: gzipSync(body, { level: 9 }) };
}

/** Deep links the shell answers; anything else under /dashboard/ is a 404. */
const PAGE_PATH = /^\/dashboard(\/|\/indexing\/?|\/keys\/?|\/endpoints\/[a-z][a-z0-9-]{0,39}\/?)?$/;

/** Answers the dashboard's paths and returns true, or returns false for any other path. */
export function createDashboardHandler(): (req: NodeRequest, res: NodeResponse, path: string) => boolean {
  const shell = asset(join(ASSETS_DIR, "index.html"));
  const assets = new Map<string, Asset>([
    ...PAGE_FILES.map((name) => [name, asset(join(ASSETS_DIR, name))] as const),
    ...LIBRARY_FILES.map((name) => [name, asset(join(UPLOT_DIR, name))] as const),
  ]);
  return (req, res, path) => {
    if (path !== "/dashboard" && !path.startsWith("/dashboard/")) return false;
    if (req.method !== "GET" && req.method !== "HEAD") {
      sendJson(res, 405, { detail: `method ${req.method} not allowed on ${path}` }, { allow: "GET, HEAD" });
      return true;
    }
    const found = PAGE_PATH.test(path) ? shell : path.startsWith("/dashboard/assets/") ? assets.get(path.slice("/dashboard/assets/".length)) : undefined;
    if (found === undefined) {
      sendJson(res, 404, { detail: `no route for GET ${path}` });
      return true;
    }
    const gzip = /\bgzip\b/.test(String(req.headers["accept-encoding"] ?? ""));
    const body = gzip ? found.gzip : found.body;
    res.writeHead(200, {
      "content-type": found.type,
      "content-length": body.length,
      // The shell is small and names the assets; the assets change with a new version of the service.
      "cache-control": found === shell ? "no-cache" : "public, max-age=300",
      vary: "accept-encoding",
      ...(gzip ? { "content-encoding": "gzip" } : {}),
    });
    if (req.method === "HEAD") res.end();
    else res.end(body);
    return true;
  };
}
