import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { deploymentOf, resolveDeployment } from "../../src/gpu/deployment.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";

// Deployment-scoped labels: the id is unique to the database and stable across restarts; a
// label names an instance only for its own deployment.

let first: TestDatabase;
let second: TestDatabase;

beforeAll(async () => {
  [first, second] = await Promise.all([createTestDatabase({ migrate: false }), createTestDatabase({ migrate: false })]);
});

afterAll(async () => {
  await Promise.all([first?.drop(), second?.drop()]);
});

describe("the deployment id", () => {
  it("is derived from the database: the same on every start, another for another database", async () => {
    const a = await resolveDeployment(first.knex, undefined);
    expect(a.id).toMatch(/^d[0-9a-f]{12}$/);
    expect((await resolveDeployment(first.knex, undefined)).id).toBe(a.id);
    expect((await resolveDeployment(second.knex, undefined)).id).not.toBe(a.id);
  });

  it("is GPU_DEPLOYMENT_ID when given", async () => {
    expect((await resolveDeployment(first.knex, "prod-eu")).id).toBe("prod-eu");
  });

  it("labels instances and reads back only its own labels", () => {
    const mine = deploymentOf("d0123456789ab");
    expect(mine.labelOf("gpu-1042")).toBe("d0123456789ab/gpu-1042");
    expect(mine.instanceIdOf("d0123456789ab/gpu-1042")).toBe("gpu-1042");
    // An endpoint's replica names its endpoint too.
    expect(mine.labelOf("gpu-1043", "coder")).toBe("d0123456789ab/gpu-1043/coder");
    expect(mine.instanceIdOf("d0123456789ab/gpu-1043/coder")).toBe("gpu-1043");
    for (const other of ["dffffffffffff/gpu-1042", "gpu-1042", "d0123456789ab/", "d0123456789ab//coder", "d0123456789ab", "d0123456789abc/gpu-1"]) {
      expect(mine.instanceIdOf(other)).toBeUndefined();
    }
  });
});
