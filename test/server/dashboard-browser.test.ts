import { mkdirSync } from "node:fs";
import { join } from "node:path";
import puppeteer, { type Browser, type HTTPRequest, type Page } from "puppeteer-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createElasticsearchClient } from "../../src/elasticsearch-client.js";
import { EndpointStore } from "../../src/gpu/endpoints/resource/endpoint-store.js";
import { KnexHistoryStore, type HistorySample } from "../../src/gpu/history/history-store.js";
import { createSimulatedMarketplace, type SimulatedMarketplace } from "../../src/gpu/marketplace/simulated/simulated.js";
import { createEndpoint, FAST_ENDPOINT_ENV, waitForEndpoint } from "../gpu/endpoints/helpers.js";
import { rest } from "../gpu/helpers.js";
import { createTestElasticsearch } from "../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { createTokenFile } from "../support/token-file.js";

// The dashboard in a real headless Chromium (Debian's chromium package, as the /docs test), against
// a service with instances, an autoscaled endpoint whose target moved, and history: every page
// renders with no console error and no request off the service's origin, the charts carry the
// points this test wrote, the Keys page and an endpoint's usage by key show the keys made through
// the API and the usage minutes this test wrote, a refresh shows a new instance without a reload,
// auth answers as SPEC.md section 5 says, and a phone's width has no sideways scroll. Screenshots
// of the pages at 1280 and 390 px go to .ci/artifacts/ for a reader to look at; the endpoint
// page's also to the file DASHBOARD_SCREENSHOT names (`npm run screenshot:dashboard` keeps
// docs/dashboard.png current).

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const ARTIFACTS = join(import.meta.dirname, "../../.ci/artifacts");
const SCREENSHOTS = [join(ARTIFACTS, "dashboard.png"), ...(process.env.DASHBOARD_SCREENSHOT ? [process.env.DASHBOARD_SCREENSHOT] : [])];
const MINUTE = 60_000;

let db: TestDatabase;
let market: SimulatedMarketplace;
let server: TestServer;
let browser: Browser;
/** Chromium's launch, begun first in beforeAll: it starts while the service and the data are made. */
let launching: Promise<Browser> | undefined;
/** The history this test wrote for endpoint `chat`: 30 minutes, its target moving from 1 to 2. */
const samples: HistorySample[] = [];
/** A machine the fleet test ends. */
let ended: string;

beforeAll(async () => {
  launching = puppeteer.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] });
  launching.catch(() => undefined); // awaited at the end of this hook, which a failed launch fails
  mkdirSync(ARTIFACTS, { recursive: true });
  db = await createTestDatabase();
  market = createSimulatedMarketplace({ creatingMs: 100, loadingMs: 100, modelServerStartMs: 100 });
  server = await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch(), marketplace: market, env: FAST_ENDPOINT_ENV });
  const first = await rest<{ instance_id: string }>(server.url, "POST", "/api/gpu/instances/from-template?template_name=budget", {});
  expect(first.status).toBe(200);
  ended = first.body.instance_id;
  await createEndpoint(server.url, {
    name: "chat",
    template_name: "budget",
    max_cost_per_hour: 5,
    autoscale: { min_replicas: 1, max_replicas: 3, target_in_flight: 2, scale_up_after_s: 0 },
  });
  await waitForEndpoint(server.url, "chat", "ready", (e) => e.state === "ready", 30_000);
  // The autoscaler's target moves as the load rises (PATCH of its floor: the same move, at once).
  expect((await rest(server.url, "PATCH", "/api/gpu/endpoints/chat", { autoscale: { min_replicas: 2, max_replicas: 3, target_in_flight: 2, scale_up_after_s: 0 } })).status).toBe(200);
  const endpoint = (await EndpointStore.create({ knex: db.knex }).getByName("chat"))!;
  const last = Math.floor(Date.now() / MINUTE) * MINUTE;
  for (let i = 29; i >= 0; i--) {
    const moved = i < 12;
    samples.push({
      endpointId: endpoint.id,
      at: new Date(last - i * MINUTE),
      load: moved ? 4 + (i % 3) : 1,
      held: i === 12 ? 1 : 0,
      readyReplicas: moved && i < 10 ? 2 : 1,
      targetReplicas: moved ? 2 : 1,
      counts: { ok: 20 + i, clientError: i % 4, serverError: i % 7 === 0 ? 1 : 0, held: i === 12 ? 1 : 0, continued: 0, cut: 0 },
      firstByte: Array.from({ length: 18 }, (_, b) => (b === 5 ? 10 + i : b === 9 ? 1 : 0)),
      costPerHour: moved && i < 10 ? 0.5 : 0.25,
    });
  }
  // The service's own sampler may have sampled the last minute already: this test's samples replace it.
  await db.knex("gpu_endpoint_history").where({ endpoint_id: endpoint.id }).delete();
  expect(await KnexHistoryStore.create({ knex: db.knex }).record(samples)).toBe(samples.length);
  browser = await launching;
}, 90_000);

afterAll(async () => {
  // The browser launched even when the hook failed before it took it.
  await (browser ?? (await launching?.catch(() => undefined)))?.close();
  await server?.close();
  await market?.close();
  await db?.drop();
});

/** Each key's prefix, as its create answered. */
const keyPrefixes = new Map<string, string>();
/** The minute of the usage rows written now, ms. */
let usageMinute = 0;

/**
 * Keys made through the API (once) and their usage minutes written straight into the table, as two
 * processes' proxies write them: team-a (budget and every limit) on chat this minute and 20
 * minutes ago, batch (no limits) on chat and on another endpoint, elsewhere (only `other`) with a
 * row on chat it may not have made, a revoked and an expired key.
 */
async function seedKeys(): Promise<void> {
  if (keyPrefixes.size > 0) return;
  // A budget is held only on priced endpoints.
  expect((await rest(server.url, "PATCH", "/api/gpu/endpoints/chat", { token_price: { input_per_mtok: 1, output_per_mtok: 2 } })).status).toBe(200);
  const keys = [
    { name: "team-a", endpoints: ["chat"], max_budget: 2, budget_duration: "1d", rpm_limit: 100, tpm_limit: 5000, max_parallel_requests: 4 },
    { name: "batch" },
    { name: "old" },
    { name: "elsewhere", endpoints: ["other"] },
    { name: "brief", expires_at: new Date(Date.now() + 1500).toISOString() },
  ];
  for (const key of keys) {
    const made = await rest<{ key_prefix: string }>(server.url, "POST", "/api/gpu/keys", key);
    expect(made.status, JSON.stringify(made.body)).toBe(200);
    keyPrefixes.set(key.name, made.body.key_prefix);
  }
  expect((await rest(server.url, "DELETE", "/api/gpu/keys/old")).status).toBe(200);
  // The service's sampler sets the machine cost of each ended minute of the last ten again, from
  // the instance records (chat's replicas bill). The rows written here lie before those minutes or
  // in the current one, which it reaches only once the minute has ended: the pages are read well
  // before (a few seconds), with at least 25 s of the minute left when the rows are written.
  if (Date.now() % MINUTE > MINUTE - 25_000) await new Promise((resolve) => setTimeout(resolve, MINUTE - (Date.now() % MINUTE) + 100));
  const now = Math.floor(Date.now() / MINUTE) * MINUTE;
  usageMinute = now;
  const row = (key: string, endpoint: string, ago: number, process: string, requests: number, prompt: number, completion: number, spend: number, machine: number, refused = {}) => ({
    key_name: key,
    endpoint_name: endpoint,
    minute: new Date(now - ago * MINUTE),
    process_id: process,
    requests,
    prompt_tokens: prompt,
    completion_tokens: completion,
    spend_micros: spend,
    machine_cost_micros: machine,
    estimated: 0,
    refused: JSON.stringify(refused),
  });
  await db.knex("gpu_key_usage_minutes").insert([
    row("team-a", "chat", 0, "p1", 7, 1200, 300, 500_000, 120_000, { rpm_limit: 2 }),
    row("team-a", "chat", 0, "p2", 3, 300, 100, 250_000, 30_000),
    row("team-a", "chat", 20, "p1", 5, 800, 200, 250_000, 60_000, { tpm_limit: 1 }),
    row("batch", "chat", 15, "p1", 40, 20_000, 5_000, 1_000_000, 400_000),
    row("batch", "other", 15, "p2", 9, 900, 0, 900, 0),
    row("elsewhere", "chat", 13, "p1", 2, 50, 50, 100, 100),
  ]);
  // The key `brief` has expired by the time a page reads it.
  const expiry = Date.parse(keys.at(-1)!.expires_at!);
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, expiry - Date.now() + 100)));
}

interface Watched {
  page: Page;
  consoleErrors: string[];
  foreignRequests: string[];
}

/** A new tab that records console errors and any request that leaves `origin`. */
async function open(origin: string, width = 1280): Promise<Watched> {
  const page = await browser.newPage();
  await page.setViewport({ width, height: 1000 });
  const watched: Watched = { page, consoleErrors: [], foreignRequests: [] };
  page.on("console", (m) => {
    // A refused data call is logged by Chromium as a failed resource: the page tells it in words.
    if (m.type() === "error" && !/status of (401|403|503)/.test(m.text())) watched.consoleErrors.push(m.text());
  });
  page.on("pageerror", (err) => watched.consoleErrors.push(String(err)));
  page.on("request", (r) => {
    const url = new URL(r.url());
    if (url.protocol !== "data:" && url.origin !== origin) watched.foreignRequests.push(r.url());
  });
  return watched;
}

/**
 * The points a chart shows at the times of this test's samples: its x values (seconds) and each
 * line's values (the service's own sampler adds the minutes after them).
 */
async function chartData(page: Page, title: string, all = false): Promise<number[][]> {
  const data = await page.$eval(`.chart[data-title="${title}"]`, (el) => (el as unknown as { plot: { data: number[][] } }).plot.data.map((line) => [...line]));
  if (all) return data;
  const last = samples.at(-1)!.at.getTime() / 1000;
  const kept = data[0]!.map((x, i) => (x <= last ? i : -1)).filter((i) => i >= 0);
  return data.map((line) => kept.map((i) => line[i]!));
}

/** The time axis a chart shows, seconds. */
const chartAxis = (page: Page, title: string) =>
  page.$eval(`.chart[data-title="${title}"]`, (el) => {
    const { min, max } = (el as unknown as { plot: { scales: { x: { min: number; max: number } } } }).plot.scales.x;
    return { min, max };
  });

// Evaluated in the page (strings: this file is compiled without the DOM's types).
const noSidewaysScroll = (page: Page) => page.evaluate("document.documentElement.scrollWidth <= window.innerWidth");

describe("the dashboard in a browser", () => {
  it("shows the fleet: its live machines first and the ended ones folded, its endpoints and its spend, and a new instance at the next refresh without a reload", async () => {
    // One machine ended: it leaves the live list for the fold.
    expect((await rest(server.url, "DELETE", `/api/gpu/instances/${ended}`)).status).toBe(200);
    const { page, consoleErrors, foreignRequests } = await open(server.url);
    await page.goto(`${server.url}/dashboard`, { waitUntil: "networkidle0" });
    await page.waitForSelector("#fleet-instances table");
    await page.waitForSelector("#fleet-ended-list table");
    const records = (await db.knex("gpu_instances").select("instance_id", "status")) as Array<{ instance_id: string; status: string }>;
    const liveIds = records.filter((r) => !["destroyed", "failed"].includes(r.status)).map((r) => r.instance_id);
    expect(liveIds.length).toBeGreaterThan(1);
    const rowIds = (selector: string) => page.$$eval(`${selector} tbody tr`, (rows) => rows.map((r) => r.querySelector("td")?.textContent ?? ""));
    expect((await rowIds("#fleet-instances")).sort()).toEqual(liveIds.sort());
    expect(await rowIds("#fleet-ended-list")).toEqual([ended]);
    // The fold is closed until the reader opens it, and stays as the reader left it across refreshes.
    expect(await page.$eval("#fleet-ended", (n) => (n as unknown as { open: boolean }).open)).toBe(false);
    expect(await page.$eval("#fleet-ended summary", (n) => n.textContent)).toContain("Ended machines (1");
    expect(await page.$eval("#fleet-endpoints", (n) => n.textContent)).toContain("chat");
    const spend = await chartData(page, "Fleet $/h and its running total", true);
    expect(spend[0]!.length).toBeGreaterThan(1000); // a point a minute over 24 h
    expect(spend[1]!.at(-1)).toBeGreaterThan(0);
    // The axis spans the window chosen, not only the points.
    const axis = await chartAxis(page, "Fleet $/h and its running total");
    expect(axis.max - axis.min).toBeCloseTo(24 * 3600, -2);
    await page.click("#fleet-ended summary");

    await page.evaluate("window.marker = 1");
    const created = await rest<{ instance_id: string }>(server.url, "POST", "/api/gpu/instances/from-template?template_name=research", {});
    await page.waitForFunction(`document.querySelector("#fleet-instances")?.textContent?.includes(${JSON.stringify(created.body.instance_id)})`, { timeout: 12_000 });
    expect(await page.evaluate("window.marker")).toBe(1);
    expect(await page.$eval("#fleet-ended", (n) => (n as unknown as { open: boolean }).open)).toBe(true);
    expect(consoleErrors).toEqual([]);
    expect(foreignRequests).toEqual([]);
    await page.close();
  }, 60_000);

  it("tells a part that failed or is slow in its place, and shows the rest of the fleet", async () => {
    const { page, consoleErrors, foreignRequests } = await open(server.url);
    await page.setRequestInterception(true);
    const held: HTTPRequest[] = [];
    // The spend's reads answer as a read past API_READ_TIMEOUT_MS does; the endpoints' list is slow.
    const timedOut = "the database took longer than 5000 ms to answer this read (API_READ_TIMEOUT_MS); try again shortly";
    page.on("request", (r) => {
      const path = new URL(r.url()).pathname;
      if (path === "/api/gpu/spend" || path.endsWith("/history")) void r.respond({ status: 503, contentType: "application/json", body: JSON.stringify({ detail: timedOut }) });
      else if (path === "/api/gpu/endpoints") held.push(r);
      else void r.continue();
    });
    await page.goto(`${server.url}/dashboard`);
    await page.waitForSelector("#fleet-spend .notice");
    expect(await page.$eval("#fleet-spend", (n) => n.textContent)).toBe(`The fleet's spend over time cannot be read now (503): ${timedOut}. The page tries again every 5 s.`);
    expect(await page.$eval("#fleet-figures", (n) => n.textContent)).toContain("cannot be read now (503)");
    await page.waitForSelector("#fleet-instances table");
    await page.waitForSelector("#fleet-ended-list table");
    expect(await page.$eval("#fleet-endpoints", (n) => n.textContent)).toBe("");
    // The slow call answers: its part fills in.
    expect(held.length).toBeGreaterThan(0);
    for (const r of held.splice(0)) await r.continue();
    await page.waitForSelector("#fleet-endpoints table");
    expect(await page.$eval("#fleet-endpoints", (n) => n.textContent)).toContain("chat");

    // An endpoint whose history cannot be read still shows its state and its events.
    await page.click('#fleet-endpoints a[href="/dashboard/endpoints/chat"]');
    await page.waitForSelector("#ep-empty .notice");
    expect(await page.$eval("#ep-empty", (n) => n.textContent)).toContain("Its history cannot be read now (503)");
    await page.waitForSelector("#ep-events table");
    expect(await page.$eval("#ep-figures", (n) => n.textContent)).toContain("ready");
    expect(consoleErrors).toEqual([]);
    expect(foreignRequests).toEqual([]);
    await page.close();
  }, 60_000);

  it("shows each market's state and the live instances rented there", async () => {
    const { page, consoleErrors, foreignRequests } = await open(server.url);
    await page.goto(`${server.url}/dashboard`, { waitUntil: "networkidle0" });
    await page.waitForSelector("#fleet-markets table");
    const rows = await page.$$eval("#fleet-markets tbody tr", (trs) => trs.map((r) => r.textContent ?? ""));
    const { markets } = (await rest<{ markets: Array<{ name: string; instances: Array<{ instance_id: string }> }> }>(server.url, "GET", "/api/gpu/markets")).body;
    expect(rows).toHaveLength(markets.length);
    expect(rows[0]).toContain(markets[0]!.name);
    expect(rows[0]).toContain("ok");
    for (const instance of markets[0]!.instances) expect(rows[0]).toContain(instance.instance_id);
    expect(consoleErrors).toEqual([]);
    expect(foreignRequests).toEqual([]);
    await page.close();
  }, 60_000);

  it("draws an endpoint's history as the points this test wrote, on one time axis", async () => {
    const { page, consoleErrors, foreignRequests } = await open(server.url);
    await page.goto(`${server.url}/dashboard/endpoints/chat`, { waitUntil: "networkidle0" });
    await page.waitForSelector("#ep-events table");
    const xs = samples.map((s) => s.at.getTime() / 1000);
    const load = await chartData(page, "Load against replicas");
    expect(load).toEqual([xs, samples.map((s) => s.load), samples.map((s) => s.held), samples.map((s) => s.targetReplicas), samples.map((s) => s.readyReplicas)]);
    const requests = await chartData(page, "Requests per minute by outcome");
    expect(requests[1]).toEqual(samples.map((s) => s.counts.ok));
    expect(requests[3]).toEqual(samples.map((s) => s.counts.serverError));
    const cost = await chartData(page, "Cost");
    expect(cost[1]).toEqual(samples.map((s) => s.costPerHour));
    // The 1 h window's axis spans the hour, though the samples fill only its last half hour.
    const axis = await chartAxis(page, "Cost");
    expect(axis.max - axis.min).toBeCloseTo(3600, -1);
    expect(axis.max).toBeGreaterThanOrEqual(xs.at(-1)!);
    const latency = await chartData(page, "Time to first byte");
    expect(latency[0]).toEqual(xs);
    expect(latency[1]!.every((ms) => ms > 25 && ms <= 50)).toBe(true);
    expect(await page.$eval("#ep-events", (n) => n.textContent)).toContain("autoscale changed");
    expect(await page.$eval("#ep-figures", (n) => n.textContent)).toContain("ready");
    expect(await page.$eval("#ep-figures", (n) => n.textContent)).toContain("Routingprefix");
    for (const path of SCREENSHOTS) {
      mkdirSync(join(path, ".."), { recursive: true });
      await page.screenshot({ path: path as `${string}.png`, fullPage: true });
    }
    expect(consoleErrors).toEqual([]);
    expect(foreignRequests).toEqual([]);
    await page.close();
  }, 30_000);

  it("shows indexing's figures, and with the search engine away says so and how to start it", async () => {
    const { page, consoleErrors, foreignRequests } = await open(server.url);
    await page.goto(`${server.url}/dashboard/indexing`, { waitUntil: "networkidle0" });
    await page.waitForSelector("#ix-status dl");
    expect(await page.$eval("#ix-status", (n) => n.textContent)).toContain("Drift");
    expect(consoleErrors).toEqual([]);
    expect(foreignRequests).toEqual([]);
    await page.close();

    // Nothing listens on port 9 (discard): the search engine is away.
    const away = await startTestServer({ knex: db.knex, elasticsearch: createElasticsearchClient("http://127.0.0.1:9") });
    try {
      const watched = await open(away.url);
      await watched.page.goto(`${away.url}/dashboard/indexing`, { waitUntil: "networkidle0" });
      await watched.page.waitForSelector("#ix-status .notice", { timeout: 15_000 });
      const text = await watched.page.$eval("#ix-status", (n) => n.textContent);
      expect(text).toContain("not reachable (unavailable)");
      expect(text).toContain("npm run elasticsearch");
      expect(watched.consoleErrors).toEqual([]);
      await watched.page.close();
    } finally {
      await away.close();
    }
  }, 60_000);

  it("lists the keys made through the API with their spend against budget, refusals and limits, and charts the selected key's tokens", async () => {
    await seedKeys();
    const { page, consoleErrors, foreignRequests } = await open(server.url);
    await page.goto(`${server.url}/dashboard/keys`, { waitUntil: "networkidle0" });
    await page.waitForSelector("#keys-list table");
    const rows = Object.fromEntries(
      (await page.$$eval("#keys-list tbody tr", (trs) => trs.map((r) => [...r.querySelectorAll("td")].map((td) => (td as unknown as { innerText: string }).innerText.replace(/\s+/g, " ").trim())))).map((cells) => [cells[0]!, cells]),
    );
    expect(Object.keys(rows)).toEqual(["team-a", "batch", "old", "elsewhere", "brief"]);
    expect(rows["team-a"]).toEqual([
      "team-a",
      "live",
      "$0.75 of $2.00 / 1d (38%)",
      "0 / 4 in flight 10 / 100 rpm 1,900 / 5,000 tpm",
      "1,900 1,500 in, 400 out",
      "10",
      "rpm_limit: 2 tpm_limit: 1",
      "chat",
      keyPrefixes.get("team-a"),
    ]);
    expect(rows["batch"]!.slice(1, 8)).toEqual(["live", "$0.00 no budget", "no limits", "0 0 in, 0 out", "0", "none", "all"]);
    expect(rows["old"]![1]).toBe("revoked");
    expect(rows["brief"]![1]).toBe("expired");
    // The budget's bar is as long as the share spent.
    expect(await page.$eval("#keys-list tbody tr .meter .bar span", (n) => (n as unknown as { style: { width: string } }).style.width)).toBe("37.5%");

    // The first key is charted: its tokens over 24 h, a point a minute, zero where it used none.
    const chart = () => page.$eval('.chart[data-title="Tokens of the selected key"]', (el) => (el as unknown as { plot: { data: number[][] } }).plot.data.map((line) => [...line]));
    const sum = (line: number[] | undefined) => (line ?? []).reduce((a, b) => a + (b ?? 0), 0);
    let data = await chart();
    expect(data[0]!.length).toBeGreaterThanOrEqual(1440);
    expect([sum(data[1]), sum(data[2])]).toEqual([2300, 600]);
    // A minute's point is drawn at its end, as every chart's points are.
    const at = (minute: number) => data[1]![data[0]!.indexOf(minute / 1000 + 60)];
    expect([at(usageMinute), at(usageMinute - 20 * MINUTE), at(usageMinute - 15 * MINUTE)]).toEqual([1500, 800, 0]);
    await page.click('#keys-list button[data-key="batch"]');
    await page.waitForFunction(`document.querySelector("#keys-charts h3")?.textContent === "Tokens of batch"`);
    data = await chart();
    expect([sum(data[1]), sum(data[2])]).toEqual([20_900, 5_000]);
    // Over 7 d, a point an hour.
    await page.click('.windows button[data-window="7 d"]');
    await page.waitForFunction(`document.querySelector('.chart[data-title="Tokens of the selected key"]').plot.data[0].length < 200`);
    expect(sum((await chart())[1])).toBe(20_900);
    expect(await page.$eval("#keys-list thead", (n) => n.textContent)).toContain("Refused (7 d)");
    await page.screenshot({ path: join(ARTIFACTS, "dashboard-keys-1280.png") as `${string}.png`, fullPage: true });
    expect(consoleErrors).toEqual([]);
    expect(foreignRequests).toEqual([]);
    await page.close();
  }, 60_000);

  it("shows an endpoint's usage by key over the window: only the keys that may call it, only its own usage", async () => {
    await seedKeys();
    const { page, consoleErrors, foreignRequests } = await open(server.url);
    await page.goto(`${server.url}/dashboard/endpoints/chat`, { waitUntil: "networkidle0" });
    await page.waitForSelector("#ep-keys table");
    const rows = await page.$$eval("#ep-keys tbody tr", (trs) => trs.map((r) => [...r.querySelectorAll("td")].map((td) => td.textContent ?? "")));
    // Spend alike: the more tokens first. `elsewhere` may not call chat; batch's usage of `other` is not chat's.
    expect(rows).toEqual([
      ["batch", "40", "25,000", "$1.00", "$0.40"],
      ["team-a", "15", "2,900", "$1.00", "$0.21"],
    ]);
    expect(await page.$eval("#ep-keys thead", (n) => n.textContent)).toBe("KeyRequestsTokensSpendMachine cost");
    await page.screenshot({ path: join(ARTIFACTS, "dashboard-endpoint-keys-1280.png") as `${string}.png`, fullPage: true });
    expect(consoleErrors).toEqual([]);
    expect(foreignRequests).toEqual([]);
    await page.close();
  }, 30_000);

  it("tells the keys' usage that cannot be read in its place, on the Keys page and an endpoint's", async () => {
    await seedKeys();
    const { page, consoleErrors, foreignRequests } = await open(server.url);
    await page.setRequestInterception(true);
    const timedOut = "the database took longer than 5000 ms to answer this read (API_READ_TIMEOUT_MS); try again shortly";
    page.on("request", (r) => {
      if (new URL(r.url()).pathname.endsWith("/usage")) void r.respond({ status: 503, contentType: "application/json", body: JSON.stringify({ detail: timedOut }) });
      else void r.continue();
    });
    await page.goto(`${server.url}/dashboard/keys`);
    await page.waitForSelector("#keys-list .notice");
    expect(await page.$eval("#keys-list", (n) => n.textContent)).toBe(`The keys and their usage cannot be read now (503): ${timedOut}. The page tries again every 5 s.`);
    await page.goto(`${server.url}/dashboard/endpoints/chat`);
    await page.waitForSelector("#ep-keys .notice");
    expect(await page.$eval("#ep-keys", (n) => n.textContent)).toContain("Its usage by key cannot be read now (503)");
    await page.waitForSelector("#ep-events table");
    expect(consoleErrors).toEqual([]);
    expect(foreignRequests).toEqual([]);
    await page.close();
  }, 30_000);

  it("has no sideways scroll on a 390 px phone, on any page", async () => {
    const { page } = await open(server.url, 390);
    await seedKeys();
    for (const path of ["/dashboard", "/dashboard/endpoints/chat", "/dashboard/keys", "/dashboard/indexing"]) {
      await page.goto(`${server.url}${path}`, { waitUntil: "networkidle0" });
      await page.waitForFunction(`!document.querySelector("main")?.textContent?.startsWith("Loading")`);
      expect(await noSidewaysScroll(page), path).toBe(true);
      if (path !== "/dashboard/indexing") await page.screenshot({ path: join(ARTIFACTS, `dashboard-${path === "/dashboard" ? "fleet" : path.split("/").at(-1)}-390.png`) as `${string}.png`, fullPage: true });
    }
    await page.close();
  }, 30_000);
});

describe("the dashboard with auth on", () => {
  const READER = { name: "reader", secret: "dashboard-reader-secret", scopes: ["gpu:read"] };
  let secured: TestServer;
  let tokenFile: ReturnType<typeof createTokenFile>;

  beforeAll(async () => {
    tokenFile = createTokenFile([READER]);
    secured = await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch(), env: { AUTH_TOKENS_FILE: tokenFile.path } });
  });

  afterAll(async () => {
    await secured?.close();
    tokenFile?.remove();
  });

  it("serves the page without a token, and asks for one", async () => {
    expect((await fetch(`${secured.url}/dashboard/endpoints/chat`)).status).toBe(200);
    expect((await fetch(`${secured.url}/dashboard/assets/uPlot.iife.min.js`)).status).toBe(200);
    const { page, consoleErrors } = await open(secured.url);
    await page.goto(`${secured.url}/dashboard`, { waitUntil: "networkidle0" });
    await page.waitForSelector("#token-form:not([hidden])");
    expect(await page.$eval("#token-why", (n) => n.textContent)).toBe("This service asks for a token.");

    await page.type("#token", "not-a-token");
    await page.click("#token-form button");
    await page.waitForFunction(`document.querySelector("#token-why")?.textContent?.includes("refused")`);
    expect(await page.$eval("#token-form", (n) => (n as unknown as { hidden: boolean }).hidden)).toBe(false);
    expect(consoleErrors).toEqual([]);
    await page.close();
  }, 30_000);

  it("lets a read-only token read the fleet and tells it which scope indexing needs", async () => {
    const { page, consoleErrors, foreignRequests } = await open(secured.url);
    await page.goto(`${secured.url}/dashboard`, { waitUntil: "networkidle0" });
    await page.waitForSelector("#token-form:not([hidden])");
    await page.type("#token", READER.secret);
    await page.click("#token-form button");
    await page.waitForSelector("#fleet-instances table");
    expect(await page.$eval("#access", (n) => n.textContent)).toContain("everything on this page is readable");

    await page.click('nav a[href="/dashboard/indexing"]');
    await page.waitForSelector("#ix-status .notice");
    expect(await page.$eval("#ix-status", (n) => n.textContent)).toContain("needs scope indexing:read");
    expect(await page.$eval("#access", (n) => n.textContent)).toContain("indexing not readable");
    // The token is kept for the session: a reload does not ask again.
    await page.reload({ waitUntil: "networkidle0" });
    await page.waitForSelector("#ix-status .notice");
    expect(await page.$eval("#token-form", (n) => (n as unknown as { hidden: boolean }).hidden)).toBe(true);
    expect(consoleErrors).toEqual([]);
    expect(foreignRequests).toEqual([]);
    await page.close();
  }, 30_000);
});
