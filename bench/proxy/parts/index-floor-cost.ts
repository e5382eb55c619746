// bench:proxy's measure of the prefix index's own work against the least that work could be (SPEC.md
// section 2, "Requests that share a prompt go where it is cached"), in the bench's own process, with
// the caches cold as they are in the proxy: 8 MiB written between two calls, as the rest of a
// request's work pushes the index's data out of the processor's caches. (In a tight loop the
// index's work costs a third of what the proxy pays for it; with its caches cold, about what the
// proxy's CPU profiles give its functions.)
//
// On the bench's 16 conversations, each held whole by one of 4 replicas, as the proxy routes them:
// - a least-outstanding request's read: the search for `"stream"`;
// - the index's work: the prompt's blocks read from the body (its messages taken up from the recent
//   ones), and the replica chosen, the index learning the prompt there, with the proxy's own
//   ReplicaChoice, balancer and metrics;
// - its floor, the least work an exact index can do for such a request: the body's messages compared
//   with the copy kept of them, the 4 replicas' maps asked for the prompt's first block and its
//   holder's for the last, and the prompt's run of blocks walked, each marked as sent now, when it
//   was last walked refreshMs ago or more (as the index does: replica-blocks.ts). No JSON read, no
//   object made, nothing counted.
import { Registry } from "prom-client";
import { ENDPOINT_PREFIX_DEFAULTS } from "../../../src/config.js";
import type { EndpointRoute } from "../../../src/module.js";
import { refreshMsOf } from "../../../src/server/prefix-index/replica-blocks.js";
import { KeptBytes } from "../../../src/server/proxy/kept-body.js";
import { readCompletion } from "../../../src/server/proxy/completion-body.js";
import { createProxyMetrics } from "../../../src/server/proxy/proxy-metrics.js";
import { ReplicaBalancer } from "../../../src/server/proxy/replica-balancer.js";
import { ReplicaChoice } from "../../../src/server/proxy/replica-choice.js";
import { mulberry32 } from "../../shared/random.js";

const ROUNDS = 7;
const CALLS = 1_500;
const COLD_BYTES = 8 * 1024 * 1024;
const REPLICAS = 4;
const MESSAGES_KEY = Buffer.from('"messages":[');
const REFRESH_MS = refreshMsOf(ENDPOINT_PREFIX_DEFAULTS.ttlMs);

export interface IndexFloorCost {
  label: string;
  /** µs per request, median of ROUNDS. */
  us: number;
}

/** `bodies`: the bench's chat bodies, one a request at random. */
export function measureIndexFloor(bodies: readonly string[]): IndexFloorCost[] {
  const raw = bodies.map((body) => Buffer.from(body));
  const route: EndpointRoute = {
    endpointId: "floor",
    routing: "prefix",
    coming: false,
    targets: Array.from({ length: REPLICAS }, (_, i) => ({ instanceId: `gpu-floor-${i + 1}`, url: `http://127.0.0.1:${9001 + i}`, apiKey: null })),
  };
  const choice = new ReplicaChoice(new ReplicaBalancer(), createProxyMetrics(new Registry(), new KeptBytes()), ENDPOINT_PREFIX_DEFAULTS);
  const read = (bytes: Buffer) => readCompletion("chat", bytes, { promptBlocks: choice.maxBlocks, recentMessages: choice.recentMessages });
  // The index has read and learned every conversation, as the proxy's has after its first round.
  const blocks = raw.map((bytes) => read(Buffer.from(bytes)).blocks!);
  for (let pass = 0; pass < 2; pass++) for (const bytes of raw) choice.first("floor", route, read(Buffer.from(bytes)).blocks);
  const floor = new FloorIndex(raw, blocks);
  const cases: Array<{ label: string; call: (bytes: Buffer, body: number) => number }> = [
    // The proxy's own read of a body on an endpoint that does not route by prefix.
    { label: "a least-outstanding request's read (the search for \"stream\")", call: (bytes) => (readCompletion("chat", bytes).plan === undefined ? 1 : 0) },
    { label: "the index's work: reading the prompt, the choice, learning it", call: (bytes) => choice.first("floor", route, read(bytes).blocks).url.length },
    { label: "its floor: the messages compared, the replicas asked, the run walked if due", call: (bytes, body) => floor.route(bytes, body) },
  ];
  const cold = new Float64Array(COLD_BYTES / 8);
  const random = mulberry32(66);
  const times = cases.map(() => [] as number[]);
  let sink = 0;
  for (let round = 0; round < ROUNDS; round++) {
    cases.forEach(({ call }, i) => {
      let total = 0n;
      for (let n = 0; n < CALLS; n++) {
        // A line of every 64 bytes written: the caches hold none of the index's data.
        for (let at = 0; at < cold.length; at += 8) cold[at]! += 1;
        const body = Math.floor(random() * raw.length);
        // A copy, as a request's body arrives: warm, where the index's kept data are not.
        const bytes = Buffer.from(raw[body]!);
        const started = process.hrtime.bigint();
        sink += call(bytes, body);
        total += process.hrtime.bigint() - started;
      }
      times[i]!.push(Number(total) / 1e3 / CALLS);
    });
  }
  if (sink < 0) console.log(sink);
  return cases.map(({ label }, i) => ({ label, us: times[i]!.sort((a, b) => a - b)[ROUNDS >> 1]! }));
}

/** The least an exact index keeps for the bodies: each one's messages, and per replica its blocks in a map and a recency list in typed arrays. */
class FloorIndex {
  private readonly kept: Buffer[];
  private readonly from: number[];
  private readonly slotOf = Array.from({ length: REPLICAS }, () => new Map<number, number>());
  private readonly hashAt: Int32Array;
  private readonly older: Int32Array;
  private readonly markAt: Int32Array;
  private readonly timeAt: Float64Array;
  private marks = 0;

  constructor(
    raw: readonly Buffer[],
    private readonly blocks: ReadonlyArray<readonly number[]>,
  ) {
    this.from = raw.map((bytes) => bytes.indexOf(MESSAGES_KEY) + MESSAGES_KEY.length);
    this.kept = raw.map((bytes, i) => Buffer.from(bytes.subarray(this.from[i], bytes.lastIndexOf("]"))));
    const slots = blocks.reduce((sum, b) => sum + b.length, 0);
    this.hashAt = new Int32Array(slots);
    this.older = new Int32Array(slots);
    this.markAt = new Int32Array(slots);
    this.timeAt = new Float64Array(slots);
    let slot = 0;
    blocks.forEach((hashes, body) => {
      hashes.forEach((hash, i) => {
        this.slotOf[body % REPLICAS]!.set(hash, slot);
        this.hashAt[slot] = hash;
        this.older[slot] = i === hashes.length - 1 ? -1 : slot + 1;
        this.timeAt[slot] = Date.now();
        slot++;
      });
    });
  }

  /** The replica body `body`'s prompt goes to, its run marked as sent now. */
  route(bytes: Buffer, body: number): number {
    const kept = this.kept[body]!;
    const from = this.from[body]!;
    if (bytes.compare(kept, 0, kept.length, from, from + kept.length) !== 0) throw new Error("the floor's kept messages differ from the body's");
    const hashes = this.blocks[body]!;
    const now = Date.now();
    let holder = -1;
    for (let replica = 0; replica < REPLICAS; replica++) if (this.slotOf[replica]!.has(hashes[0]!)) holder = replica;
    const last = this.slotOf[holder]!.get(hashes[hashes.length - 1]!)!;
    if (now - this.timeAt[last]! > ENDPOINT_PREFIX_DEFAULTS.ttlMs) return -1;
    if (now - this.timeAt[last]! < REFRESH_MS) return holder;
    const mark = ++this.marks;
    let slot = this.slotOf[holder]!.get(hashes[0]!)!;
    for (let i = 0; i < hashes.length && slot >= 0 && this.hashAt[slot] === hashes[i]; i++) {
      this.markAt[slot] = mark;
      this.timeAt[slot] = now;
      slot = this.older[slot]!;
    }
    return holder;
  }
}
