import { describe, expect, it } from "vitest";
import { useTestServer } from "../support/server.js";

// Input an attacker would forge: page tokens that decode but carry values PostgreSQL would
// refuse (a 400, never a 500), and huge identifiers that error details must not echo in full.

const t = useTestServer();

function token(parts: unknown[]): string {
  return Buffer.from(JSON.stringify(parts)).toString("base64url");
}

describe("forged page tokens", () => {
  it.each([
    ["an as-of instant Date.parse takes but PostgreSQL refuses", "uptime", token([1, "uptime", "", "1", ["5", "gpu-1"]])],
    ["an as-of instant on February 30", "uptime", token([1, "uptime", "", "2024-02-30T00:00:00.000Z", ["5", "gpu-1"]])],
    ["a created_at key on February 30", "created_at", token([1, "created_at", "", "2024-01-01T00:00:00.000Z", ["2024-02-30T00:00:00.000000Z", "gpu-1"]])],
    ["a created_at key in year 0", "created_at", token([1, "created_at", "", "2024-01-01T00:00:00.000Z", ["0000-01-01T00:00:00.000000Z", "gpu-1"]])],
    ["a cost that underflows double precision", "cost_per_hour", token([1, "cost_per_hour", "", "2024-01-01T00:00:00.000Z", ["1e-400", "gpu-1"]])],
    ["a cost that overflows double precision", "cost_per_hour", token([1, "cost_per_hour", "", "2024-01-01T00:00:00.000Z", ["1e400", "gpu-1"]])],
  ])("answers 400 to %s", async (_what, sortBy, pageToken) => {
    const res = await fetch(`${t.server.url}/api/gpu/instances?sort_by=${sortBy}&page_token=${pageToken}`);
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ field: "page_token" });
  });

  it("accepts a zero cost and a tiny one PostgreSQL can hold", async () => {
    for (const cost of ["0", "0.0", "-0", "1e-310", "0.0609"]) {
      const pageToken = token([1, "cost_per_hour", "", "2024-01-01T00:00:00.000Z", [cost, "gpu-1"]]);
      const res = await fetch(`${t.server.url}/api/gpu/instances?sort_by=cost_per_hour&page_token=${pageToken}`);
      expect(res.status, cost).toBe(200);
    }
  });
});

describe("huge identifiers in error details", () => {
  const huge = "x".repeat(500_000);

  it("cuts an unknown offer_id to a short prefix in the 404 detail", async () => {
    const res = await fetch(`${t.server.url}/api/gpu/instances`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ offer_id: huge }),
    });
    expect(res.status).toBe(404);
    const { detail } = (await res.json()) as { detail: string };
    expect(detail).toBe(`Offer '${"x".repeat(64)}... (500000 characters)' not found`);
  });

  it("cuts an unknown template name and instance id the same way", async () => {
    for (const path of [`/api/gpu/templates/${huge.slice(0, 5000)}`, `/api/gpu/instances/gpu-${"1".repeat(5000)}`]) {
      const res = await fetch(`${t.server.url}${path}`);
      expect(res.status, path.slice(0, 30)).toBe(404);
      const { detail } = (await res.json()) as { detail: string };
      expect(detail.length, path.slice(0, 30)).toBeLessThan(150);
    }
  });
});
