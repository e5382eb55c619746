import { isObject, jsonReader, type Json } from "../http/json-reader.js";
import {
  MARKET_STATUSES,
  type CreateMarketInstanceRequest,
  type MarketInstance,
  type MarketOffer,
  type MarketStatus,
} from "../port.js";

// The JSON of the remote marketplace (docs/marketplace-api.md) and its mapping to the port's
// types. Answers are checked field by field: a marketplace that sends something else fails with a
// clear error here instead of putting NaN prices or undefined ids into the database.

const { malformed, object, array, string, number, integer, boolean, optional } = jsonReader("The marketplace");

export function toCreateBody(request: CreateMarketInstanceRequest): Json {
  return {
    offer_id: request.offerId,
    label: request.label,
    image: request.image,
    start_command: request.startCommand,
    env: request.env,
    ...(request.llmPort !== undefined && { llm_port: request.llmPort }),
    ...(request.llmModelName !== undefined && { llm_model_name: request.llmModelName }),
  };
}

export function parseOffers(body: unknown): MarketOffer[] {
  return array(object(body, "answer").offers, "offers").map((item, i) => parseOffer(item, `offers[${i}]`));
}

export function parseInstanceAnswer(body: unknown): MarketInstance {
  return parseInstance(object(body, "answer").instance, "instance");
}

export function parseInstances(body: unknown): MarketInstance[] {
  return array(object(body, "answer").instances, "instances").map((item, i) => parseInstance(item, `instances[${i}]`));
}

/** The `message` of an error answer, if it has one. */
export function errorMessage(body: unknown): string | undefined {
  const error = isObject(body) && isObject(body.error) ? body.error : undefined;
  return typeof error?.message === "string" ? error.message.slice(0, 300) : undefined;
}

/** The `code` of an error answer, if it has one. */
export function errorCode(body: unknown): string | undefined {
  const error = isObject(body) && isObject(body.error) ? body.error : undefined;
  return typeof error?.code === "string" ? error.code : undefined;
}

function parseOffer(value: unknown, where: string): MarketOffer {
  const o = object(value, where);
  return {
    id: string(o.id, `${where}.id`),
    gpuName: string(o.gpu_name, `${where}.gpu_name`),
    numGpus: number(o.num_gpus, `${where}.num_gpus`),
    gpuRam: number(o.gpu_ram, `${where}.gpu_ram`),
    dphTotal: number(o.dph_total, `${where}.dph_total`),
    rentable: boolean(o.rentable, `${where}.rentable`),
    location: o.location === undefined ? "" : string(o.location, `${where}.location`),
    directPortCount: optional(integer, o.direct_port_count, `${where}.direct_port_count`),
    cudaMaxGood: optional(number, o.cuda_max_good, `${where}.cuda_max_good`),
    reliability: optional(number, o.reliability, `${where}.reliability`),
  };
}

function parseInstance(value: unknown, where: string): MarketInstance {
  const o = object(value, where);
  const status = string(o.status, `${where}.status`);
  // The contract rents no interruptible machines, so `preempted` is none of its statuses.
  if (!(MARKET_STATUSES as readonly string[]).includes(status) || status === "preempted") malformed(`${where}.status`, "a known status");
  const mappings = object(o.port_mappings ?? {}, `${where}.port_mappings`);
  return {
    id: string(o.id, `${where}.id`),
    offerId: string(o.offer_id, `${where}.offer_id`),
    label: string(o.label, `${where}.label`),
    status: status as MarketStatus,
    publicIp: string(o.public_ip ?? "", `${where}.public_ip`),
    sshPort: number(o.ssh_port ?? 0, `${where}.ssh_port`),
    portMappings: Object.fromEntries(
      Object.entries(mappings).map(([key, port]) => [key, number(port, `${where}.port_mappings.${key}`)]),
    ),
    gpuName: string(o.gpu_name, `${where}.gpu_name`),
    numGpus: number(o.num_gpus, `${where}.num_gpus`),
    gpuRam: number(o.gpu_ram, `${where}.gpu_ram`),
    dphTotal: number(o.dph_total, `${where}.dph_total`),
    interruptible: false,
  };
}
