import { readFileSync } from "node:fs";
import type { DescService } from "@bufbuild/protobuf";
import type { ApiHints } from "./api-hints.js";
import { createDocsHandler } from "./docs-handler.js";
import { createOpenApiDocument } from "./openapi-document.js";
import { loadProtoComments } from "./proto-comments.js";
import { projectFile } from "./project-file.js";

export interface ApiDocsOptions {
  services: readonly DescService[];
  hints: ApiHints;
  authEnabled: boolean;
}

const PACKAGE = JSON.parse(readFileSync(projectFile("package.json"), "utf8")) as { version: string };

/** Builds the OpenAPI document once, at start-up, and the handler of /openapi.json and /docs. */
export function createApiDocs(options: ApiDocsOptions) {
  const document = createOpenApiDocument({
    ...options,
    comments: loadProtoComments(),
    title: "GPU and indexing services",
    version: PACKAGE.version,
  });
  return { document, handle: createDocsHandler(document) };
}
