/** This isolate's random name, drawn on first use (workerd forbids random values at module scope). */
let id: string | undefined;

/** The name this isolate gives itself to the objects that split a limit among isolates, and to the metrics shard it flushes to. */
export function isolateId(): string {
  id ??= crypto.randomUUID();
  return id;
}
