import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { createLogger, redactUrl } from "../src/logger.js";

describe("redactUrl", () => {
  it("hides the password of a database URL and keeps the rest readable", () => {
    expect(redactUrl("postgres://app:s3cret@db.internal:5432/goods")).toBe("postgres://app:***@db.internal:5432/goods");
    expect(redactUrl("http://127.0.0.1:9200")).toBe("http://127.0.0.1:9200/");
    expect(redactUrl("not a url")).toBe("[invalid url]");
  });
});

describe("the structured log", () => {
  it("redacts credentials carried in logged objects", () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(chunk.toString());
        done();
      },
    });
    const logger = createLogger("info", sink);
    logger.info({ req: { authorization: "Bearer tok-123" }, db: { password: "pw-456" }, market: { apiKey: "key-789" } }, "x");
    logger.info({ record: { modelApiKey: "mk-1", model_api_key: "mk-2" }, request: { env: { VLLM_API_KEY: "mk-3" } }, authorization: "Bearer tok-4" }, "y");
    const text = lines.join("");
    for (const secret of ["tok-123", "pw-456", "key-789", "mk-1", "mk-2", "mk-3", "tok-4"]) expect(text).not.toContain(secret);
    expect(text).toContain("[redacted]");
  });
});
