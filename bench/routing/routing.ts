// npm run bench:routing: prefix-aware routing against least outstanding requests, in one run.
//
// The built service (as `npm start` runs it) on the simulated marketplace, whose model servers
// cache prefixes as vLLM does and take SIM_PREFILL_MS_PER_KTOKEN (the default, 20) per thousand
// prompt tokens they do not hold, one prompt at a time (a replica busy reading delays the rest).
// Two endpoints of 4 replicas side by side, `routing: prefix` and `routing: least_outstanding`, get
// the same load at the same time: (a) multi-turn chats that share long system prompts, each turn
// resending the conversation; (b) prompts that share nothing. Each request comes after a pause of
// its caller's, so that callers do not fall into step.
// Printed per workload and endpoint: the replicas' prefix-cache hit rate (their vLLM counters on
// /metrics), p50/p90 time to first token, answers a second, answers per replica, and the service's
// event-loop delay over the phase (parts/service-delay.ts); then the goals as verdicts. Bounded:
// every loop runs a fixed list of requests; everything listens on loopback.
import { loadavg } from "node:os";
import { setTimeout as sleep } from "node:timers/promises";
import { createTestDatabase } from "../../test/support/postgres.js";
import { spawnService, type ServiceProcess } from "../../test/support/spawn-service.js";
import { createChatClient, runLoops } from "./parts/chat-client.js";
import { hitRate, readCounters } from "./parts/replica-counters.js";
import { describeLoopDelay, readLoopDelay } from "./parts/service-delay.js";
import { printPhase, sharedPrefixVerdict, unsharedVerdict, type PhaseFigures, type Routing } from "./parts/routing-report.js";
import { sharedPrefixChats, unsharedPrompts, type Message, type Prompt } from "./parts/workloads.js";
import { adminDatabaseUrl } from "../shared/support.js";

const REPLICAS = 4;
const IN_FLIGHT = Number(process.env.BENCH_IN_FLIGHT ?? 8);
const SEED = Number(process.env.BENCH_SEED ?? 65);
const CHATS = {
  seed: SEED,
  systemPrompts: Number(process.env.BENCH_SYSTEM_PROMPTS ?? 8),
  systemChars: 4_000,
  conversations: Number(process.env.BENCH_CONVERSATIONS ?? 96),
  turns: Number(process.env.BENCH_TURNS ?? 5),
  turnChars: 1_600,
  maxPauseMs: 200,
  answerTokens: { min: 8, max: 24 },
};
/**
 * Both endpoints route these alike (no replica holds any of them), so their p90s differ by chance
 * alone. Each prompt comes after a pause, as a chat's turn does: sent back to back, the callers
 * fell into step, the same two meeting at one replica's prefill request after request, and the
 * ratio of the p90s lay from 0.89 to 1.07 over ten runs. With the pauses, 0.98 to 1.02 over five
 * runs of 1,920 (0.98 to 1.04 over three of 480).
 */
const UNSHARED = { count: Number(process.env.BENCH_UNSHARED ?? 1920), chars: 4_000 };
/** The answers to unshared prompts, tokens. */
const UNSHARED_TOKENS = 12;
const ROUTINGS: Routing[] = ["prefix", "least_outstanding"];
const NAMES: Record<Routing, string> = { prefix: "routing-prefix", least_outstanding: "routing-least-outstanding" };
/** The controller's clocks, short so that 8 replicas are ready within seconds. */
const SERVICE_ENV = {
  MARKETPLACE: "simulated",
  SIM_CREATING_MS: "500",
  SIM_LOADING_MS: "500",
  SIM_MODEL_SERVER_START_MS: "500",
  GPU_STATUS_SYNC_MS: "1000",
  GPU_ENDPOINT_PROBE_MS: "1000",
  GPU_ENDPOINT_READY_AFTER: "2",
  GPU_STATUS_CACHE_MS: "0",
};

type EndpointView = { state: string; ready_replicas: number; routing?: string; instances?: Array<{ instance_id: string; state: string; url: string }> };

async function main(): Promise<void> {
  process.env.DATABASE_URL ??= adminDatabaseUrl();
  const db = await createTestDatabase();
  let service: ServiceProcess | undefined;
  try {
    service = await spawnService({ ...SERVICE_ENV, DATABASE_URL: db.url, ELASTICSEARCH_URL: process.env.ELASTICSEARCH_URL ?? "http://127.0.0.1:9" }, { fromBuild: true });
    const api = apiOf(service.url);
    for (const routing of ROUTINGS) {
      const res = await api("POST", "/api/gpu/endpoints", { name: NAMES[routing], template_name: "budget", replicas: REPLICAS, max_cost_per_hour: 20, routing });
      if (res.status !== 200) throw new Error(`creating the ${routing} endpoint answered ${res.status}: ${JSON.stringify(res.body)}`);
    }
    const views = Object.fromEntries(await Promise.all(ROUTINGS.map(async (r) => [r, await untilReady(api, NAMES[r])] as const))) as Record<Routing, EndpointView>;
    for (const routing of ROUTINGS) {
      if (views[routing].routing !== routing) console.log(`warning: the service reports routing '${views[routing].routing ?? "(none)"}' for the endpoint created with '${routing}': it does not know the setting, both endpoints route alike`);
    }
    const urls = (r: Routing) => views[r].instances!.filter((i) => i.state === "ready").map((i) => i.url);
    const port = Number(new URL(service.url).port);
    console.log(`the built service on the simulated marketplace (its defaults: SIM_PREFILL_MS_PER_KTOKEN 20, SIM_KV_CACHE_TOKENS 65536, tokens 20 ms apart); load average at the start ${loadavg().map((l) => l.toFixed(1)).join(" ")}`);
    console.log(`two endpoints of ${REPLICAS} replicas (${ROUTINGS.join(", ")}), ${IN_FLIGHT} callers each at once, streamed answers`);

    const chats = sharedPrefixChats(CHATS);
    const shared = await side(
      `(a) ${CHATS.conversations} conversations of ${CHATS.turns} turns (${CHATS.turnChars} characters each, after a pause of up to ${CHATS.maxPauseMs} ms, answered in ${CHATS.answerTokens.min} to ${CHATS.answerTokens.max} tokens) over ${CHATS.systemPrompts} system prompts of ${CHATS.systemChars} characters, the whole conversation resent each turn`,
      service.url,
      urls,
      (routing) => chatPhase(port, NAMES[routing], chats),
    );
    const prompts = unsharedPrompts(SEED + 1, UNSHARED.count, UNSHARED.chars, CHATS.maxPauseMs);
    const unshared = await side(
      `(b) ${UNSHARED.count} prompts of ${UNSHARED.chars} characters that share nothing, each after a pause of up to ${CHATS.maxPauseMs} ms, answered in ${UNSHARED_TOKENS} tokens`,
      service.url,
      urls,
      (routing) => promptPhase(port, NAMES[routing], prompts),
    );
    console.log("");
    console.log(sharedPrefixVerdict(shared));
    console.log(unsharedVerdict(unshared));
  } finally {
    await service?.stop("SIGTERM");
    await db.drop();
  }
}

function apiOf(base: string) {
  return async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${base}${path}`, { method, headers: { "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };
}

async function untilReady(api: ReturnType<typeof apiOf>, name: string): Promise<EndpointView> {
  const deadline = Date.now() + 120_000;
  for (;;) {
    const view = (await api("GET", `/api/gpu/endpoints/${name}`)).body as unknown as EndpointView;
    if (view.ready_replicas === REPLICAS) return view;
    if (Date.now() > deadline) throw new Error(`endpoint ${name} never had ${REPLICAS} ready replicas: ${JSON.stringify(view)}`);
    await sleep(250);
  }
}

/**
 * The same phase on every endpoint at once, with each one's replicas' hit rate over it; printed
 * under `title`, with the service's event-loop delay over the phase.
 */
async function side(title: string, serviceUrl: string, urls: (r: Routing) => string[], phase: (r: Routing) => Promise<Omit<PhaseFigures, "hitRate">>): Promise<Record<Routing, PhaseFigures>> {
  // A reading restarts the delay's monitor: the one after the phase covers the phase alone.
  await readLoopDelay(serviceUrl);
  const results = await Promise.all(
    ROUTINGS.map(async (routing) => {
      const before = await readCounters(urls(routing));
      const figures = await phase(routing);
      return [routing, { ...figures, hitRate: hitRate(before, await readCounters(urls(routing))) }] as const;
    }),
  );
  const delay = await readLoopDelay(serviceUrl);
  const figures = Object.fromEntries(results) as Record<Routing, PhaseFigures>;
  printPhase(title, figures);
  console.log(describeLoopDelay(delay));
  return figures;
}

/** Each conversation turn by turn, its answers appended to what the next turn resends. */
async function chatPhase(port: number, endpoint: string, chats: ReturnType<typeof sharedPrefixChats>) {
  const client = createChatClient({ port, endpoint }, IN_FLIGHT);
  const figures = emptyFigures();
  const started = performance.now();
  await runLoops(chats, IN_FLIGHT, async (chat) => {
    const messages: Message[] = [{ role: "system", content: chat.system }];
    for (const turn of chat.turns) {
      await sleep(turn.pauseMs);
      messages.push({ role: "user", content: turn.text });
      const answer = await client.ask(messages, turn.maxTokens);
      record(figures, answer);
      if (!answer.ok) return;
      messages.push({ role: "assistant", content: answer.text });
    }
  });
  client.close();
  return { ...figures, seconds: (performance.now() - started) / 1000 };
}

async function promptPhase(port: number, endpoint: string, prompts: Prompt[]) {
  const client = createChatClient({ port, endpoint }, IN_FLIGHT);
  const figures = emptyFigures();
  const started = performance.now();
  await runLoops(prompts, IN_FLIGHT, async (prompt) => {
    await sleep(prompt.pauseMs);
    record(figures, await client.ask([{ role: "user", content: prompt.text }], UNSHARED_TOKENS));
  });
  client.close();
  return { ...figures, seconds: (performance.now() - started) / 1000 };
}

function emptyFigures() {
  return { answers: 0, failed: 0, ttftMs: [] as number[], byReplica: new Map<string, number>() };
}

function record(figures: ReturnType<typeof emptyFigures>, answer: { ok: boolean; ttftMs: number; instance: string }): void {
  if (!answer.ok) {
    figures.failed += 1;
    return;
  }
  figures.answers += 1;
  figures.ttftMs.push(answer.ttftMs);
  figures.byReplica.set(answer.instance, (figures.byReplica.get(answer.instance) ?? 0) + 1);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
