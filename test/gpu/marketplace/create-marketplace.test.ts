import { Writable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import pino from "pino";
import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../../src/config.js";
import { createMarketplace } from "../../../src/gpu/marketplace/index.js";
import { startContractServer } from "./remote/contract-server.js";

/** A logger that keeps every line it writes, to check what reaches the logs. */
function capturingLogger() {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(chunk.toString());
      done();
    },
  });
  return { logger: pino({ level: "trace" }, stream), lines };
}

describe("marketplace configuration", () => {
  it("defaults to the simulated marketplace with a clock of seconds", () => {
    expect(loadConfig({}).marketplace).toEqual({
      markets: ["simulated"],
      url: undefined,
      apiKey: undefined,
      timeoutMs: 10_000,
      retries: 3,
      vastApiKey: undefined,
      vastApiUrl: "https://console.vast.ai",
      vastMinIntervalMs: undefined,
      vastRetries: 8,
      vastBackoffMs: 500,
      vastCreateTimeoutMs: 90_000,
      vastCreateLookupMs: 30_000,
      vastMinReliability: 0.95,
      runpodApiKey: undefined,
      runpodApiUrl: "https://api.runpod.io",
      simCreatingMs: 5_000,
      simLoadingMs: 10_000,
      simModelServerStartMs: 5_000,
      simPreemptPerHour: 0,
      simPrefillMsPerKtoken: 20,
      simKvCacheTokens: 65_536,
    });
  });

  it("reads MARKETPLACE as a list of distinct markets in order of preference, each with its settings", () => {
    const config = loadConfig({ MARKETPLACE: " vastai , simulated,runpod", VAST_API_KEY: "v", RUNPOD_API_KEY: "r", RUNPOD_API_URL: "http://127.0.0.1:9" });
    expect(config.marketplace.markets).toEqual(["vastai", "simulated", "runpod"]);
    expect(config.marketplace.runpodApiKey).toBe("r");
    expect(config.marketplace.runpodApiUrl).toBe("http://127.0.0.1:9");
  });

  it("reads SIM_PREEMPT_PER_HOUR as preemptions per interruptible instance-hour", () => {
    expect(loadConfig({ SIM_PREEMPT_PER_HOUR: "0.2" }).marketplace.simPreemptPerHour).toBe(0.2);
  });

  it("reads the simulated model servers' prefill time and prefix-cache budget", () => {
    const config = loadConfig({ SIM_PREFILL_MS_PER_KTOKEN: "50", SIM_KV_CACHE_TOKENS: "0" });
    expect(config.marketplace.simPrefillMsPerKtoken).toBe(50);
    expect(config.marketplace.simKvCacheTokens).toBe(0);
  });

  it.each([
    [{ SIM_PREFILL_MS_PER_KTOKEN: "-1" }, /SIM_PREFILL_MS_PER_KTOKEN/],
    [{ SIM_KV_CACHE_TOKENS: "lots" }, /SIM_KV_CACHE_TOKENS/],
    [{ MARKETPLACE: "vastai" }, /VAST_API_KEY is required when MARKETPLACE=vastai/],
    [{ MARKETPLACE: "vastai", VAST_API_KEY: "k", VAST_API_URL: "console.vast.ai" }, /VAST_API_URL/],
    [{ MARKETPLACE: "vastai", VAST_API_KEY: "k", VAST_API_URL: "ftp://console.vast.ai" }, /VAST_API_URL/],
    [{ MARKETPLACE: "vastai", VAST_API_KEY: "k", VAST_MIN_INTERVAL_MS: "-5" }, /VAST_MIN_INTERVAL_MS/],
    [{ MARKETPLACE: "vastai", VAST_API_KEY: "k", VAST_RETRIES: "100" }, /VAST_RETRIES/],
    [{ MARKETPLACE: "vastai", VAST_API_KEY: "k", VAST_CREATE_TIMEOUT_MS: "500" }, /VAST_CREATE_TIMEOUT_MS/],
    [{ MARKETPLACE: "vastai", VAST_API_KEY: "k", VAST_MIN_RELIABILITY: "95" }, /VAST_MIN_RELIABILITY/],
    [{ GPU_DEPLOYMENT_ID: "prod/eu" }, /GPU_DEPLOYMENT_ID must be 1 to 40 letters/],
    [{ GPU_STATUS_CACHE_MS: "soon" }, /GPU_STATUS_CACHE_MS must be an integer/],
    [{ MARKETPLACE: "remote", MARKETPLACE_URL: "http://m.example" }, /MARKETPLACE_API_KEY is required/],
    [{ MARKETPLACE: "remote", MARKETPLACE_API_KEY: "k" }, /MARKETPLACE_URL is required/],
    [{ MARKETPLACE: "remote" }, /^MARKETPLACE_URL and MARKETPLACE_API_KEY are required when MARKETPLACE=remote$/],
    [{ MARKETPLACE: "cloud" }, /MARKETPLACE must name markets among simulated, remote, vastai, runpod \(comma-separated\), got 'cloud'/],
    [{ MARKETPLACE: "vastai,cloud", VAST_API_KEY: "k" }, /MARKETPLACE must name markets among .* got 'cloud'/],
    [{ MARKETPLACE: "simulated,simulated" }, /MARKETPLACE names 'simulated' twice/],
    [{ MARKETPLACE: " , " }, /MARKETPLACE holds no market name/],
    [{ MARKETPLACE: "runpod" }, /^RUNPOD_API_KEY is required when MARKETPLACE=runpod$/],
    [{ MARKETPLACE: "vastai,runpod" }, /^VAST_API_KEY and RUNPOD_API_KEY are required when MARKETPLACE names vastai and runpod$/],
    [{ MARKETPLACE: "simulated,runpod", RUNPOD_API_KEY: "k", RUNPOD_API_URL: "api.runpod.io" }, /RUNPOD_API_URL is not a valid URL/],
    [{ MARKETPLACE_URL: "ftp://m.example" }, /MARKETPLACE_URL must start with http/],
    [{ MARKETPLACE_TIMEOUT_MS: "0" }, /MARKETPLACE_TIMEOUT_MS must be an integer/],
    [{ MARKETPLACE_RETRIES: "many" }, /MARKETPLACE_RETRIES must be an integer/],
    [{ SIM_LOADING_MS: "-1" }, /SIM_LOADING_MS must be an integer/],
    [{ SIM_PREEMPT_PER_HOUR: "-0.5" }, /SIM_PREEMPT_PER_HOUR must be a number from 0 to 3600/],
    [{ SIM_PREEMPT_PER_HOUR: "often" }, /SIM_PREEMPT_PER_HOUR must be a number/],
    [{ SIM_PREEMPT_PER_HOUR: "4000" }, /SIM_PREEMPT_PER_HOUR must be a number from 0 to 3600/],
  ])("refuses %o at start naming the variable", (env, message) => {
    expect(() => loadConfig(env)).toThrow(ConfigError);
    expect(() => loadConfig(env)).toThrow(message);
  });
});

describe("createMarketplace", () => {
  it("builds the simulated marketplace on the configured clock", async () => {
    const config = loadConfig({ SIM_CREATING_MS: "30", SIM_LOADING_MS: "30", SIM_MODEL_SERVER_START_MS: "30" });
    const market = createMarketplace(config, capturingLogger().logger);
    try {
      const offer = (await market.listOffers()).find((o) => o.rentable)!;
      const created = await market.createInstance({ offerId: offer.id, label: "gpu-1", image: "i", startCommand: "c", env: {} });
      expect(created.status).toBe("creating");
      await sleep(120);
      expect((await market.getInstance(created.id))!.status).toBe("running");
    } finally {
      await market.close();
    }
  });

  it("builds the remote marketplace, which reaches the configured URL with the key and never logs it", async () => {
    const apiKey = "remote-secret-key-42";
    const contract = await startContractServer({ apiKey });
    const { logger, lines } = capturingLogger();
    const config = loadConfig({ MARKETPLACE: "remote", MARKETPLACE_URL: contract.url, MARKETPLACE_API_KEY: apiKey });
    const market = createMarketplace(config, logger);
    try {
      contract.throttle(1, "0");
      // One market: ids as the market gives them, each offer naming its market.
      const expected = (await contract.backend.listOffers()).map((offer) => ({ ...offer, market: "remote" }));
      expect(await market.listOffers()).toEqual(expected);
      expect(lines.some((line) => line.includes("marketplace call retried"))).toBe(true);
      expect(lines.join("")).not.toContain(apiKey);
    } finally {
      await market.close();
      await contract.close();
    }
  });
});
