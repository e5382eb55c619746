import { create, isMessage, type DescMessage, type DescMethodUnary, type MessageShape } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createContextValues,
  createHandlerContext,
  type Interceptor,
  type UnaryRequest,
  type UnaryResponse,
} from "@connectrpc/connect";
import type { ServiceRegistration } from "../service-registration.js";

export type UnaryCaller = (
  method: DescMethodUnary,
  input: MessageShape<DescMessage>,
  header: Headers,
  signal: AbortSignal,
) => Promise<MessageShape<DescMessage>>;

type UnaryNext = (req: UnaryRequest) => Promise<UnaryResponse>;
type UnaryImpl = (request: unknown, context: ReturnType<typeof createHandlerContext>) => unknown;

/**
 * Calls a service implementation in-process, through the same interceptors (errors, auth) as
 * the Connect handler, handing the request message over as it is: no serialization round trip,
 * which is most of the cost of a small REST call.
 */
export function createInProcessCaller(services: readonly ServiceRegistration[], interceptors: readonly Interceptor[]): UnaryCaller {
  const impls = new Map(services.map((s) => [s.desc.typeName, s.impl as Record<string, unknown>]));

  const invoke: UnaryNext = async (req) => {
    const { service, method } = req;
    const impl = impls.get(service.typeName);
    const fn = impl?.[method.localName];
    if (typeof fn !== "function") {
      throw new ConnectError(`${service.typeName}.${method.name} is not implemented`, Code.Unimplemented);
    }
    const context = createHandlerContext({
      service,
      method,
      protocolName: "rest",
      requestMethod: req.requestMethod,
      url: req.url,
      requestSignal: req.signal,
      requestHeader: req.header,
      contextValues: req.contextValues,
    });
    const output = await (fn as UnaryImpl).call(impl, req.message, context);
    return {
      stream: false,
      service,
      method,
      header: context.responseHeader,
      trailer: context.responseTrailer,
      message: isMessage(output, method.output) ? output : create(method.output, output as never),
    };
  };
  // The first interceptor is the outermost, as in connect's own handlers.
  const chain = [...interceptors].reverse().reduce<UnaryNext>((next, interceptor) => interceptor(next as never) as UnaryNext, invoke);

  return async (method, input, header, signal) => {
    const response = await chain({
      stream: false,
      service: method.parent,
      method,
      requestMethod: "POST",
      url: `/${method.parent.typeName}/${method.name}`,
      signal,
      header,
      contextValues: createContextValues(),
      message: input,
    });
    return response.message;
  };
}
