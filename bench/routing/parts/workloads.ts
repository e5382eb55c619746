import { mulberry32 } from "../../shared/random.js";
// The two workloads of bench:routing, generated from a seed so that both endpoints get the same:
// (a) multi-turn chats that share long system prompts (each turn resends the whole conversation,
// as chat clients do), and (b) prompts that share nothing (each begins with its own words).

export interface Message {
  role: "system" | "user" | "assistant";
  content: string;
}

/** One conversation: its system prompt and the user's turns, in order. */
export interface Conversation {
  system: string;
  turns: Turn[];
}

/**
 * A user's turn: what they write after a pause (reading the answer, typing), and how long an
 * answer it gets. Both vary, as people's do, so that callers never fall into step with each other
 * (callers in step with a round-robin tie-break would each meet the same replica every turn).
 */
export interface Turn {
  text: string;
  pauseMs: number;
  maxTokens: number;
}

export interface ChatWorkloadOptions {
  seed: number;
  systemPrompts: number;
  /** Characters of each system prompt. */
  systemChars: number;
  conversations: number;
  turns: number;
  /** Characters of each user turn. */
  turnChars: number;
  /** The most a user pauses before a turn, ms (uniform from 0). */
  maxPauseMs: number;
  /** Answers' lengths, tokens (uniform). */
  answerTokens: { min: number; max: number };
}

const WORDS = (
  "the a of to and in is for on with as by at from that this it be are was were or an not have has " +
  "model replica prompt cache token block request answer stream endpoint market machine budget price " +
  "order invoice customer shipment warehouse refund policy contract clause section figure table chart " +
  "report summary detail reason example question careful exact brief formal polite review check"
).split(" ");

/** About `chars` characters of words, opening with `tag` so that no two texts share a beginning. */
function text(random: () => number, tag: string, chars: number): string {
  let out = `${tag}:`;
  while (out.length < chars) out += ` ${WORDS[Math.floor(random() * WORDS.length)]}`;
  return out;
}

/** Conversations spread over the system prompts in turn. */
export function sharedPrefixChats(options: ChatWorkloadOptions): Conversation[] {
  const random = mulberry32(options.seed);
  const systems = Array.from({ length: options.systemPrompts }, (_, i) => text(random, `You are assistant ${i}; follow these instructions`, options.systemChars));
  return Array.from({ length: options.conversations }, (_, c) => ({
    system: systems[c % systems.length]!,
    turns: Array.from({ length: options.turns }, (_, t) => ({
      text: text(random, `conversation ${c}, turn ${t}`, options.turnChars),
      pauseMs: Math.floor(random() * options.maxPauseMs),
      maxTokens: options.answerTokens.min + Math.floor(random() * (options.answerTokens.max - options.answerTokens.min + 1)),
    })),
  }));
}

/** A single-turn prompt, sent after a pause as a turn is (see Turn): callers in step meet the same replica's prefill each time. */
export interface Prompt {
  text: string;
  pauseMs: number;
}

/** Single-turn prompts of `chars` characters, no two alike from their first character on, each after a pause of up to `maxPauseMs`. */
export function unsharedPrompts(seed: number, count: number, chars: number, maxPauseMs: number): Prompt[] {
  const random = mulberry32(seed);
  return Array.from({ length: count }, (_, i) => ({ text: text(random, `${i.toString(36)}-${Math.floor(random() * 1e9).toString(36)}`, chars), pauseMs: Math.floor(random() * maxPauseMs) }));
}
