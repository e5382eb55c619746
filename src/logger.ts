import pino, { type DestinationStream, type Logger } from "pino";

/**
 * Structured JSON logs on stdout (or the given stream). Credentials never reach them: headers are
 * not logged, URLs are redacted before logging, and credential-named keys are censored anyway.
 */
export function createLogger(level: string, destination?: DestinationStream): Logger {
  const options = {
    level,
    // Bearer tokens, marketplace keys and model-server keys (server/auth/, gpu/): never in a log line.
    redact: {
      paths: [
        "authorization",
        "*.authorization",
        "*.headers.authorization",
        "*.password",
        "*.apiKey",
        "*.api_key",
        "*.token",
        "*.modelApiKey",
        "*.model_api_key",
        "*.env.VLLM_API_KEY",
      ],
      censor: "[redacted]",
    },
  };
  return destination ? pino(options, destination) : pino(options);
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
