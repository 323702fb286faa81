import { z } from 'zod';
import { sleep } from './sleep';

// Durable Object calls, counted and optionally slowed, for the bench's capacity model (`npm run
// bench`, through /admin/dev/faults/object-calls). Dev builds only: durable-objects/routing.ts
// wraps a stub here behind the inline build flag, so staging and production bundles contain
// neither the wrapper nor this module (workers/kernel/build-flags.ts).
//
// The switches and counts are module state. Under Miniflare the Worker and its objects share
// one isolate (see dev-faults.ts), so calls the Worker makes and calls one object makes to
// another (a room shard to its hub) land in the same counts.

/** PUT /admin/dev/faults/object-calls: count calls, delay each one, or zero the counts. */
export const ObjectCallsBody = z
  .object({
    /** Stubs made from now on count every call (false: stubs made from now on are plain). */
    watch: z.boolean().optional(),
    /** Every counted call waits this long before it is sent (a far-away object); 0: none. */
    delayMs: z.number().int().min(0).max(10_000).optional(),
    /** Zero the counts. */
    reset: z.literal(true).optional(),
  })
  .strict();
export type ObjectCallsBody = z.infer<typeof ObjectCallsBody>;

/** One method's count: calls sent, and the requests they carried (a batch call carries many). */
export type CallCount = { calls: number; items: number };
/** The counts by object class, then by method. */
export type ObjectCallCounts = Record<string, Record<string, CallCount>>;
export type ObjectCallsView = { watch: boolean; delayMs: number; since: number; counts: ObjectCallCounts };

const state = { watch: false, delayMs: 0, since: Date.now() };
let counts: ObjectCallCounts = {};

/** The object class (or role) an object's name belongs to, from routing.ts's naming scheme. */
export function objectClassOf(name: string): string {
  switch (name.split(':')[0]) {
    case 'goods':
      return 'GoodsStock';
    case 'guard':
    case 'config':
      return 'EdgeGuard';
    case 'limits':
      return 'LimitsStore';
    case 'gate':
      return 'AdmissionGate';
    case 'room':
      return name.endsWith(':hub') ? 'WaitingRoom hub' : 'WaitingRoom';
    case 'metrics':
      return 'Metrics';
    default:
      return 'other';
  }
}

/** The settings and the counts so far. */
export function objectCalls(): ObjectCallsView {
  return { ...state, counts: structuredClone(counts) };
}

/** Applies a PUT body; returns the view after it. */
export function setObjectCalls(body: ObjectCallsBody, now = Date.now()): ObjectCallsView {
  if (body.watch !== undefined) {
    state.watch = body.watch;
  }
  if (body.delayMs !== undefined) {
    state.delayMs = body.delayMs;
  }
  if (body.reset) {
    counts = {};
    state.since = now;
  }
  return objectCalls();
}

/**
 * Calls a queue consumer makes with what one batch of its messages settled: in production too
 * one call carries them all, so each counts as one request however many results it carries.
 */
const CONSUMER_BATCHES = new Set(['GoodsStock.settle', 'WaitingRoom.results']);

/** Requests one call carries: the length of its first array argument (a batch of the edge's requests), else 1. */
function itemsOf(cls: string, method: string, args: unknown[]): number {
  if (CONSUMER_BATCHES.has(`${cls}.${method}`)) {
    return 1;
  }
  const batch = args.find((a) => Array.isArray(a));
  return Array.isArray(batch) ? batch.length : 1;
}

function record(cls: string, method: string, args: unknown[]): void {
  const byMethod = counts[cls] ?? {};
  counts[cls] = byMethod;
  const c = byMethod[method] ?? { calls: 0, items: 0 };
  c.calls += 1;
  c.items += itemsOf(cls, method, args);
  byMethod[method] = c;
}

/** Properties of a stub that are not calls. */
const NOT_CALLS = new Set<string | symbol>(['id', 'name', 'then', 'constructor', 'toJSON']);

type Callable = (...args: unknown[]) => unknown;

/**
 * The stub of the object called `name`, counting each call while watching is on (and delaying
 * it by the set delay); the stub itself when it is off, so nothing changes unless asked.
 */
export function watchedStub<T extends object>(name: string, stub: T): T {
  if (!state.watch) {
    return stub;
  }
  const cls = objectClassOf(name);
  return new Proxy(stub, {
    get(target, prop) {
      const value: unknown = Reflect.get(target, prop);
      if (typeof prop === 'symbol' || NOT_CALLS.has(prop) || typeof value !== 'function') {
        return value;
      }
      const method = value as Callable;
      // Called on the stub itself: its native methods (fetch) need it as `this`.
      const send = (args: unknown[]) => Reflect.apply(method, target, args);
      return (...args: unknown[]) => {
        record(cls, prop, args);
        const delayMs = state.delayMs;
        // The delayed call loses promise pipelining; nothing in the project pipelines calls.
        return delayMs > 0 ? sleep(delayMs).then(() => send(args)) : send(args);
      };
    },
  });
}
