import { mkdirSync } from "node:fs";
import { join } from "node:path";
import puppeteer, { type Browser, type Page } from "puppeteer-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestElasticsearch } from "../support/elasticsearch.js";
import { startTestServer, useTestServer } from "../support/server.js";

// The docs page in a real headless Chromium (Debian's chromium package; .ci/run installs it).
// The screenshot is kept as a CI artifact.

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const SCREENSHOT = join(import.meta.dirname, "../../.ci/artifacts/docs-try-it-out.png");

const t = useTestServer();
let browser: Browser;
let page: Page;
const consoleErrors: string[] = [];
const foreignRequests: string[] = [];

beforeAll(async () => {
  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    // Root in CI containers: Chromium's sandbox needs user namespaces those rarely allow.
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 1600 });
  page.on("console", (message) => {
    if (message.type() === "error") consoleErrors.push(message.text());
  });
  page.on("pageerror", (err) => consoleErrors.push(String(err)));
  page.on("request", (request) => {
    const url = new URL(request.url());
    if (url.protocol !== "data:" && url.host !== new URL(t.server.url).host) foreignRequests.push(request.url());
  });
  await page.goto(`${t.server.url}/docs`, { waitUntil: "networkidle0" });
  await page.waitForSelector(".opblock", { timeout: 30_000 });
});

afterAll(async () => {
  await browser?.close();
});

describe("the /docs page in a browser", () => {
  it("loads with no console errors and no request to any other host", () => {
    expect(consoleErrors).toEqual([]);
    expect(foreignRequests).toEqual([]);
  });

  it("lists the operations of both services", async () => {
    const tags = await page.$$eval(".opblock-tag", (nodes) => nodes.map((n) => n.getAttribute("data-tag")));
    expect(tags).toEqual(["GpuService", "IndexingService"]);
    const operations = await page.$$eval(".opblock-summary", (nodes) =>
      nodes.map((n) => `${n.querySelector(".opblock-summary-method")?.textContent} ${n.querySelector(".opblock-summary-path")?.getAttribute("data-path")}`),
    );
    expect(operations).toContain("GET /api/gpu/templates");
    expect(operations).toContain("DELETE /api/gpu/instances/{instance_id}");
    expect(operations).toContain("GET /api/search/v1/index/db/goods");
    expect(operations).toContain("POST /api/search/v1/batch/product");
  });

  it("shows the three templates after 'Try it out' and 'Execute' on GET /api/gpu/templates", async () => {
    const operation = "#operations-GpuService-GpuService_ListTemplates";
    await page.click(`${operation} .opblock-summary`);
    await page.waitForSelector(`${operation} .try-out__btn`);
    await page.click(`${operation} .try-out__btn`);
    await page.waitForSelector(`${operation} .execute`);
    await page.click(`${operation} .execute`);
    const answer = `${operation} .live-responses-table tr.response`;
    await page.waitForSelector(`${answer} .response-col_description pre`, { timeout: 30_000 });
    const status = await page.$eval(`${answer} .response-col_status`, (n) => n.textContent?.trim());
    const body = await page.$eval(`${answer} .response-col_description pre`, (n) => n.textContent ?? "");
    expect(status).toBe("200");
    const templates = (JSON.parse(body) as { templates: Array<{ name: string }> }).templates;
    expect(templates.map((x) => x.name)).toEqual(["high_performance", "budget", "research"]);

    await page.$eval(operation, (n) => n.scrollIntoView());
    mkdirSync(join(SCREENSHOT, ".."), { recursive: true });
    await page.screenshot({ path: SCREENSHOT as `${string}.png` });
    expect(consoleErrors).toEqual([]);
    expect(foreignRequests).toEqual([]);
  });
});

describe("the Authorize button of /docs", () => {
  it("is not shown while auth is off (no token would be checked)", async () => {
    expect(await page.$(".auth-wrapper .authorize")).toBeNull();
  });

  it("is shown when tokens are configured", async () => {
    const TOKEN = "docs-browser-token";
    const secured = await startTestServer({ knex: t.db.knex, elasticsearch: createTestElasticsearch(), env: { AUTH_TOKENS: TOKEN } });
    const securedPage = await browser.newPage();
    try {
      await securedPage.setExtraHTTPHeaders({ authorization: `Bearer ${TOKEN}` });
      await securedPage.goto(`${secured.url}/docs`, { waitUntil: "networkidle0" });
      await securedPage.waitForSelector(".opblock", { timeout: 30_000 });
      expect(await securedPage.$(".auth-wrapper .authorize")).not.toBeNull();
    } finally {
      await securedPage.close();
      await secured.close();
    }
  });
});
