// Which ready replica a request goes to when its endpoint routes by prefix (SPEC.md section 2,
// "Requests that share a prompt go where it is cached"), pure: the one holding the longest prefix
// of its prompt, unless that replica's answers in flight exceed the least loaded one's by more than
// BALANCE_ABSOLUTE and more than BALANCE_RELATIVE times (both: a few more requests on an idle
// endpoint, or twice as many on a busy one, are a cheap price for a cached prefix). Otherwise, and
// when no replica holds any of it, least outstanding requests decide (the caller's balancer).

/** A balanced choice needs the holder's load above the least one's plus this many requests... */
export const BALANCE_ABSOLUTE = 4;
/** ...and above this many times the least one's. */
export const BALANCE_RELATIVE = 2;

/** How a request was routed: to the longest prefix (`hit`), by load because none held any (`miss`) or because the holder was too busy (`balanced`). */
export type PrefixOutcome = "hit" | "miss" | "balanced";

export type PrefixChoice = { outcome: "hit"; index: number } | { outcome: "miss" | "balanced" };

const MISS: PrefixChoice = { outcome: "miss" };
const BALANCED: PrefixChoice = { outcome: "balanced" };

/**
 * The candidate to send to (`hit`), or why load alone decides. Candidate i holds `held[i]` blocks
 * of the prompt and has `loads[i]` answers in flight (two arrays, as the index and the balancer
 * give them: no object per candidate on a request's way).
 */
export function choosePrefix(held: readonly number[], loads: readonly number[]): PrefixChoice {
  let best = -1;
  let least = Infinity;
  for (let i = 0; i < held.length; i++) {
    const load = loads[i]!;
    least = Math.min(least, load);
    if (held[i] === 0) continue;
    // The longest prefix; of equal ones, the less loaded.
    if (best < 0 || held[i]! > held[best]! || (held[i] === held[best] && load < loads[best]!)) best = i;
  }
  if (best < 0) return MISS;
  const load = loads[best]!;
  if (load > least + BALANCE_ABSOLUTE && load > least * BALANCE_RELATIVE) return BALANCED;
  return { outcome: "hit", index: best };
}
