import { readdirSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import type { DescService } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { HTTP_ROUTE_SCOPES, RPC_SCOPES, scopeOfHttpPath, scopeOfRpc } from "../../../src/server/auth/scope-table.js";

// Every RPC of every generated service has a scope: a new RPC cannot ship without one. Read from
// gen/ rather than a hand list, so a service added later is covered too.

const root = join(import.meta.dirname, "../../..");

async function generatedServices(): Promise<DescService[]> {
  const files = readdirSync(join(root, "gen"), { recursive: true, encoding: "utf8" }).filter((f) => f.endsWith("_pb.ts"));
  const services: DescService[] = [];
  for (const file of files) {
    const module = (await import(/* @vite-ignore */ pathToFileURL(join(root, "gen", file)).href)) as Record<string, unknown>;
    for (const value of Object.values(module)) {
      if ((value as { kind?: string } | null)?.kind === "service") services.push(value as DescService);
    }
  }
  return services;
}

describe("the scope table", () => {
  it("names a scope for every RPC of every service", async () => {
    const services = await generatedServices();
    expect(services.map((s) => s.typeName)).toEqual(expect.arrayContaining(["gpu.v1.GpuService", "search.v1.IndexingService"]));
    const missing = services.flatMap((s) => s.methods.filter((m) => scopeOfRpc(s.typeName, m.name) === undefined).map((m) => `${s.typeName}/${m.name}`));
    expect(missing).toEqual([]);
  });

  it("names no RPC that does not exist (a renamed RPC leaves no stale entry)", async () => {
    const services = new Map((await generatedServices()).map((s) => [s.typeName, new Set(s.methods.map((m) => m.name))]));
    const stale = Object.entries(RPC_SCOPES).flatMap(([service, methods]) =>
      Object.keys(methods).filter((m) => !services.get(service)?.has(m)).map((m) => `${service}/${m}`),
    );
    expect(stale).toEqual([]);
  });

  it("would notice an RPC without a scope", () => {
    expect(scopeOfRpc("gpu.v1.GpuService", "NoSuchRpc")).toBeUndefined();
  });

  it("gives the non-RPC routes their scopes and leaves health and REST paths to their RPCs", () => {
    expect(HTTP_ROUTE_SCOPES.length).toBeGreaterThan(0);
    expect(scopeOfHttpPath("/metrics")).toBe("ops:read");
    expect(scopeOfHttpPath("/openapi.json")).toBe("ops:read");
    expect(scopeOfHttpPath("/docs")).toBe("ops:read");
    expect(scopeOfHttpPath("/docs/swagger-ui.css")).toBe("ops:read");
    expect(scopeOfHttpPath("/endpoints/chat/v1/models")).toBe("endpoints:invoke");
    expect(scopeOfHttpPath("/healthz")).toBeUndefined();
    expect(scopeOfHttpPath("/api/gpu/templates")).toBeUndefined();
    expect(scopeOfHttpPath("/metricsx")).toBeUndefined();
  });
});
