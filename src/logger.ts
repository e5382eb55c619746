import pino, { type Logger } from "pino";

/** Structured JSON logs; credentials never reach them (headers are not logged, URLs are redacted). */
export function createLogger(level: string): Logger {
  return pino({
    level,
    redact: { paths: ["*.authorization", "*.password", "*.apiKey", "*.api_key", "*.token"], censor: "[redacted]" },
  });
}

/** A URL safe to log: the password, if any, is replaced. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = "***";
    return parsed.toString();
  } catch {
    return "[invalid url]";
  }
}
