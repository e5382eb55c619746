import type { Client } from "@elastic/elasticsearch";
import type { Knex } from "knex";
import type { Logger } from "pino";
import type { Config } from "./config.js";
import type { CreationHooks } from "./gpu/creation/creation.js";
import type { Marketplace } from "./gpu/marketplace/port.js";
import type { Metrics } from "./server/metrics.js";
import type { ServiceRegistration } from "./server/service-registration.js";

// What the app gives each service module and what a module gives back: the app (app.ts) and the
// modules (gpu/, indexing/) both import these types, and not each other.

export interface AppDeps {
  config: Config;
  logger: Logger;
  knex: Knex;
  elasticsearch: Client;
  marketplace: Marketplace;
  /** Test seam for fault injection in GPU instance creation. */
  gpuCreationHooks?: CreationHooks;
}

/** What each service module is built from: the app's dependencies and the metrics registry. */
export type ModuleDeps = AppDeps & { metrics: Metrics };

/** A service with the background work it owns. */
export interface ServiceModule {
  service: ServiceRegistration;
  start(): Promise<void>;
  stop(): Promise<void>;
}


/** A replica the proxy may send requests to. */
export interface RouteTarget {
  instanceId: string;
  /** Base URL of its model server, e.g. http://203.0.113.5:41234 (no trailing slash, no /v1). */
  url: string;
  /** The model server's own key (sent as Authorization: Bearer), null for servers without one. */
  apiKey: string | null;
}

/** Where the proxy finds an endpoint's ready replicas. */
export interface EndpointDirectory {
  /** undefined: no such endpoint (or deleted) -> 404; []: none ready -> 503. */
  readyReplicas(name: string): Promise<RouteTarget[] | undefined>;
}
