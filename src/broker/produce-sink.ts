/**
 * Produce answered through a {@link ProduceSink} (docs/benchmarks.md "Small requests (issue
 * #22)"): {@link produceVia} starts a produce on any {@link Broker}, through its `produceTo`
 * where it has one, else through its promise.
 */
import type { Broker, ProduceRequest, ProduceResult, ProduceSink } from "./types.ts";

/**
 * Starts `request` on `broker` and answers `sink` once (possibly before returning); never throws.
 * A broker without `produceTo` is called through `produce`, its promise settling the sink.
 */
export function produceVia(broker: Broker, request: ProduceRequest, sink: ProduceSink): void {
  if (broker.produceTo !== undefined) return broker.produceTo(request, sink);
  let response: Promise<ProduceResult>;
  try {
    response = broker.produce(request);
  } catch (err) {
    return sink.failed(err);
  }
  settleSink(response, sink);
}

/** Settles `sink` with `response`: `produced` with its result, `failed` with its rejection. */
export function settleSink(response: Promise<ProduceResult>, sink: ProduceSink): void {
  response.then(
    (result) => sink.produced(result),
    (err: unknown) => sink.failed(err),
  );
}
