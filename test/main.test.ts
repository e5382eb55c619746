import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { spawnService } from "./support/spawn-service.js";

// `npm start` on its embedded defaults: no DATABASE_URL (embedded PostgreSQL under DATA_DIR) and
// no reachable Elasticsearch. The GPU routes work, readiness says what is missing, SIGTERM stops
// the process cleanly, and the data survives a restart.

const dataDir = mkdtempSync(join(tmpdir(), "embedded-"));

afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

const startMain = () =>
  spawnService({ DATA_DIR: dataDir, ELASTICSEARCH_URL: "http://127.0.0.1:9" }, { unset: ["DATABASE_URL"], timeoutMs: 90_000 });

describe("the service on its embedded defaults", () => {
  it("serves the GPU API without a database server or Elasticsearch, and stops cleanly on SIGTERM", async () => {
    let createdId = "";
    const first = await startMain();
    try {
      const templates = await fetch(`${first.url}/api/gpu/templates`);
      expect(templates.status).toBe(200);
      expect(((await templates.json()) as { templates: unknown[] }).templates).toHaveLength(3);

      const ready = await fetch(`${first.url}/readyz`);
      expect(ready.status).toBe(503);
      expect(await ready.json()).toMatchObject({ checks: { database: "ok", search_engine: "unreachable" } });

      const indexing = await fetch(`${first.url}/api/search/v1/index/db/goods?interval=1`);
      expect(indexing.status).toBe(503);
      expect(((await indexing.json()) as { detail: string }).detail).toMatch(/Elasticsearch/i);

      const created = await fetch(`${first.url}/api/gpu/instances/from-template?template_name=budget`, { method: "POST" });
      expect(created.status).toBe(200);
      createdId = ((await created.json()) as { instance_id: string }).instance_id;
    } finally {
      await first.stop("SIGTERM");
    }
    expect((await first.exited).code).toBe(0);

    // The embedded database persists under DATA_DIR: a second start finds the instance.
    const second = await startMain();
    try {
      const list = await fetch(`${second.url}/api/gpu/instances`);
      const { instances } = (await list.json()) as { instances: Array<{ instance_id: string }> };
      expect(instances.map((i) => i.instance_id)).toContain(createdId);
      expect((await fetch(`${second.url}/api/gpu/instances/${createdId}`, { method: "DELETE" })).status).toBe(200);
    } finally {
      await second.stop("SIGTERM");
    }
    expect((await second.exited).code).toBe(0);
  }, 240_000);
});
