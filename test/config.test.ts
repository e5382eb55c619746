import { describe, expect, it } from "vitest";
import { ConfigError, hostNarrowedToLoopback, loadConfig } from "../src/config.js";

describe("loadConfig", () => {
  it("has working defaults and binds to loopback without auth tokens", () => {
    const config = loadConfig({});
    expect(config).toMatchObject({ port: 8080, host: "127.0.0.1", databaseUrl: undefined, dataDir: "./data" });
    expect(config.elasticsearchUrl).toBe("http://127.0.0.1:9200");
    expect(Object.isFrozen(config)).toBe(true);
  });

  it("ignores a public HOST while no token is configured, and says so", () => {
    const env = { HOST: "0.0.0.0" };
    expect(loadConfig(env).host).toBe("127.0.0.1");
    expect(hostNarrowedToLoopback(env)).toBe(true);
    expect(loadConfig({ ...env, AUTH_TOKENS: "a, b" })).toMatchObject({ host: "0.0.0.0", authTokens: ["a", "b"] });
  });

  it("counts AUTH_TOKENS_FILE as auth: the server may bind beyond loopback", () => {
    expect(loadConfig({ AUTH_TOKENS_FILE: "/etc/service/tokens.json" })).toMatchObject({ host: "0.0.0.0", authTokensFile: "/etc/service/tokens.json" });
    expect(hostNarrowedToLoopback({ HOST: "0.0.0.0", AUTH_TOKENS_FILE: "/etc/service/tokens.json" })).toBe(false);
  });

  it.each([
    [{ PORT: "http" }, /PORT/],
    [{ PORT: "70000" }, /PORT must be an integer from 0 to 65535/],
    [{ DATABASE_URL: "mysql://x" }, /DATABASE_URL must start with postgres:\/\/ or postgresql:\/\//],
    [{ ELASTICSEARCH_URL: "not a url" }, /ELASTICSEARCH_URL is not a valid URL/],
    [{ LOG_LEVEL: "loud" }, /LOG_LEVEL must be one of/],
    [{ TLS_CERT_FILE: "cert.pem" }, /TLS_CERT_FILE and TLS_KEY_FILE/],
    [{ GPU_MAX_FLEET_DPH: "0" }, /GPU_MAX_FLEET_DPH must be a number > 0/],
    [{ GPU_MAX_FLEET_DPH: "-3" }, /GPU_MAX_FLEET_DPH must be a number > 0/],
    [{ GPU_MAX_FLEET_DPH: "ten" }, /GPU_MAX_FLEET_DPH must be a number > 0/],
    [{ TLS_CERT_FILE: "/nonexistent/cert.pem", TLS_KEY_FILE: "/nonexistent/key.pem" }, /^TLS_CERT_FILE cannot be read: ENOENT \/nonexistent\/cert.pem$/],
    [{ AUTH_TOKENS: "," }, /AUTH_TOKENS is set but holds no token/],
    [{ AUTH_TOKENS: "" }, /AUTH_TOKENS is set but holds no token/],
    [{ AUTH_TOKENS: " , ,, " }, /AUTH_TOKENS is set but holds no token/],
  ])("fails on %o with a message naming the variable", (env, message) => {
    expect(() => loadConfig(env)).toThrow(ConfigError);
    expect(() => loadConfig(env)).toThrow(message);
  });

  it("caps the fleet's spend only when GPU_MAX_FLEET_DPH is set", () => {
    expect(loadConfig({}).gpu.maxFleetDph).toBeUndefined();
    expect(loadConfig({ GPU_MAX_FLEET_DPH: "12.5" }).gpu.maxFleetDph).toBe(12.5);
  });

  it("ends the history and spend reads after 5 s unless API_READ_TIMEOUT_MS says otherwise", () => {
    expect(loadConfig({}).gpu.apiReadTimeoutMs).toBe(5_000);
    expect(loadConfig({ API_READ_TIMEOUT_MS: "250" }).gpu.apiReadTimeoutMs).toBe(250);
    expect(() => loadConfig({ API_READ_TIMEOUT_MS: "0" })).toThrow(/API_READ_TIMEOUT_MS must be an integer from 100 to 600000/);
  });

  it("gives a replica 300 s for its first answer byte unless GPU_ENDPOINT_FIRST_BYTE_MS says otherwise", () => {
    expect(loadConfig({}).gpu.endpoints.firstByteMs).toBe(300_000);
    expect(loadConfig({ GPU_ENDPOINT_FIRST_BYTE_MS: "1500" }).gpu.endpoints.firstByteMs).toBe(1500);
    expect(() => loadConfig({ GPU_ENDPOINT_FIRST_BYTE_MS: "0" })).toThrow(/GPU_ENDPOINT_FIRST_BYTE_MS must be an integer/);
  });

  it("looks for a bid worth a fallback's place every minute, never less often, unless GPU_ENDPOINT_MIX_RECHECK_MS says sooner", () => {
    expect(loadConfig({}).gpu.endpoints.mixRecheckMs).toBe(60_000);
    expect(loadConfig({ GPU_ENDPOINT_MIX_RECHECK_MS: "1000" }).gpu.endpoints.mixRecheckMs).toBe(1000);
    expect(() => loadConfig({ GPU_ENDPOINT_MIX_RECHECK_MS: "60001" })).toThrow(/GPU_ENDPOINT_MIX_RECHECK_MS must be an integer from 10 to 60000/);
  });

  it("holds requests for a coming replica up to 300 s, 1000 per endpoint, unless GPU_ENDPOINT_HOLD_MS and _MAX say otherwise", () => {
    expect(loadConfig({}).gpu.endpoints).toMatchObject({ holdMs: 300_000, holdMax: 1000 });
    expect(loadConfig({ GPU_ENDPOINT_HOLD_MS: "0", GPU_ENDPOINT_HOLD_MAX: "5" }).gpu.endpoints).toMatchObject({ holdMs: 0, holdMax: 5 });
    expect(() => loadConfig({ GPU_ENDPOINT_HOLD_MS: "-1" })).toThrow(/GPU_ENDPOINT_HOLD_MS must be an integer/);
    expect(() => loadConfig({ GPU_ENDPOINT_HOLD_MAX: "x" })).toThrow(/GPU_ENDPOINT_HOLD_MAX must be an integer/);
  });

  it("keeps up to 64 MiB of request bodies for holding and retries in one process, unless GPU_ENDPOINT_KEPT_BODY_BYTES says otherwise", () => {
    expect(loadConfig({}).gpu.endpoints.keptBodyBytes).toBe(64 * 1024 * 1024);
    expect(loadConfig({ GPU_ENDPOINT_KEPT_BODY_BYTES: "0" }).gpu.endpoints.keptBodyBytes).toBe(0);
    expect(() => loadConfig({ GPU_ENDPOINT_KEPT_BODY_BYTES: "-1" })).toThrow(/GPU_ENDPOINT_KEPT_BODY_BYTES must be an integer from 0 to 17179869184/);
    expect(() => loadConfig({ GPU_ENDPOINT_KEPT_BODY_BYTES: "64MiB" })).toThrow(/GPU_ENDPOINT_KEPT_BODY_BYTES must be an integer/);
  });

  it("keeps prompt blocks for prefix routing 10 minutes and 16384 per replica, unless GPU_ENDPOINT_PREFIX_TTL_MS and GPU_ENDPOINT_PREFIX_MAX_BLOCKS say otherwise", () => {
    expect(loadConfig({}).gpu.endpoints).toMatchObject({ prefixTtlMs: 600_000, prefixMaxBlocks: 16_384 });
    expect(loadConfig({ GPU_ENDPOINT_PREFIX_TTL_MS: "120000", GPU_ENDPOINT_PREFIX_MAX_BLOCKS: "1" }).gpu.endpoints).toMatchObject({ prefixTtlMs: 120_000, prefixMaxBlocks: 1 });
    expect(() => loadConfig({ GPU_ENDPOINT_PREFIX_TTL_MS: "10" })).toThrow(/GPU_ENDPOINT_PREFIX_TTL_MS must be an integer from 1000/);
    expect(() => loadConfig({ GPU_ENDPOINT_PREFIX_MAX_BLOCKS: "0" })).toThrow(/GPU_ENDPOINT_PREFIX_MAX_BLOCKS must be an integer from 1/);
  });

  it("holds 1024 completion tokens for a request without max_tokens unless GPU_KEY_HOLD_TOKENS says otherwise", () => {
    expect(loadConfig({}).gpu.endpoints.keyHoldTokens).toBe(1024);
    expect(loadConfig({ GPU_KEY_HOLD_TOKENS: "256" }).gpu.endpoints.keyHoldTokens).toBe(256);
    expect(() => loadConfig({ GPU_KEY_HOLD_TOKENS: "0" })).toThrow(/GPU_KEY_HOLD_TOKENS must be an integer/);
  });

  it("takes a comma-separated list of Elasticsearch nodes, each checked", () => {
    expect(loadConfig({ ELASTICSEARCH_URL: "http://es1:9200, http://es2:9200" }).elasticsearchUrl).toBe("http://es1:9200,http://es2:9200");
    expect(() => loadConfig({ ELASTICSEARCH_URL: "http://es1:9200,ftp://es2" })).toThrow(/ELASTICSEARCH_URL must start with http:\/\/ or https:\/\//);
  });

  it("never echoes a database URL, which may hold a password", () => {
    expect(() => loadConfig({ DATABASE_URL: "postgres://u:secret@db:99999/x" })).toThrow(/^DATABASE_URL is not a valid URL$/);
  });
});
