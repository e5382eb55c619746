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

export interface PrefixCandidate {
  /** Blocks of the prompt it holds. */
  held: number;
  /** Its answers in flight. */
  load: number;
}

export type PrefixChoice = { outcome: "hit"; index: number } | { outcome: "miss" | "balanced" };

/** The candidate to send to (`hit`), or why load alone decides. */
export function choosePrefix(candidates: readonly PrefixCandidate[]): PrefixChoice {
  let best = -1;
  let least = Infinity;
  for (let i = 0; i < candidates.length; i++) {
    const candidate = candidates[i]!;
    least = Math.min(least, candidate.load);
    if (candidate.held === 0) continue;
    const holder = candidates[best];
    // The longest prefix; of equal ones, the less loaded.
    if (holder === undefined || candidate.held > holder.held || (candidate.held === holder.held && candidate.load < holder.load)) best = i;
  }
  if (best < 0) return { outcome: "miss" };
  const load = candidates[best]!.load;
  if (load > least + BALANCE_ABSOLUTE && load > least * BALANCE_RELATIVE) return { outcome: "balanced" };
  return { outcome: "hit", index: best };
}
