import { z } from 'zod';
import { log } from './log';
import { sleep } from './sleep';

// Faults a local chaos run switches on (`npm run chaos`, through /admin/dev/faults), in dev
// builds only. Every call site sits behind the inline build flag, so staging and production
// bundles contain neither the calls nor this module (workers/kernel/build-flags.ts;
// test/node/deploy-build.e2e.test.ts looks for the strings below).
//
// The switches are module state. Under Miniflare the Worker, its Durable Objects and its queue
// consumers run in one isolate (checked: an object reads what a route wrote here, and
// `ctx.abort()` replaces the object's instance while this module keeps its state), so the
// route that flips a switch and the code that obeys it share this module. In production each
// object has an isolate of its own and these switches would never reach it, one more reason
// they do not exist there.

/** The message of every error a switch makes, so logs and tests can tell it from a real failure. */
export const DEV_FAULT = 'dev fault:';

const Seconds = z.number().int().min(0).max(3_600);

/** PUT /admin/dev/faults: how long from now each fault lasts (0 ends it; absent leaves it as it is). */
export const DevFaultsBody = z
  .object({
    /** The goods' objects' sends to the order queue throw. */
    queueSendFails: Seconds.optional(),
    /** Every order message the consumer receives is sent to the queue once more (a second delivery). */
    duplicateDeliveries: Seconds.optional(),
    /** The order consumer fails after its Postgres write, before it settles or acks. */
    consumerFailsAfterWrite: Seconds.optional(),
    /**
     * The order consumer holds each batch it receives, unwritten and unacked, until the pause
     * ends: the queue fills behind it, as behind a consumer that is down. Ending it early (0)
     * lets the held batch and the backlog through at once.
     */
    consumerPaused: Seconds.optional(),
  })
  .strict();
export type DevFaultsBody = z.infer<typeof DevFaultsBody>;
export type DevFault = keyof DevFaultsBody;

/**
 * POST /admin/dev/faults/reset: the goods whose objects throw their in-memory state away: its
 * stock shards (`stock`, the default), its waiting room's shards and coordinator (`room`), the
 * edge's objects its sale leans on (`edge`: every guard shard, the limits store and its copies,
 * the goods' admission gate, every metrics shard), or several of them.
 */
export const DevResetBody = z
  .object({
    goodsId: z.number().int().positive().max(Number.MAX_SAFE_INTEGER),
    objects: z
      .array(z.enum(['stock', 'room', 'edge']))
      .min(1)
      .max(3)
      .optional(),
    /**
     * How long the edge's objects wait for the sale's own calls to meet their reset (a report, a
     * limits read, a renewal, a flush) before the route makes the call itself (default 0).
     */
    edgeWaitMs: z.number().int().min(0).max(10_000).optional(),
  })
  .strict();

const FAULTS = [
  'queueSendFails',
  'duplicateDeliveries',
  'consumerFailsAfterWrite',
  'consumerPaused',
] as const satisfies readonly DevFault[];
const activeUntil = new Map<DevFault, number>();
/** Order messages already sent a second time while duplicateDeliveries is on (each is doubled once). */
const doubled = new Set<string>();
const DOUBLED_MAX = 100_000;
/** Objects that reset the next time resetIfAsked runs in them, by name (resetName). */
const resets = new Set<string>();

function active(fault: DevFault, now: number): boolean {
  return (activeUntil.get(fault) ?? 0) > now;
}

/** Each fault's end (epoch ms), or null when it is off. */
export function devFaults(now = Date.now()): Record<DevFault, number | null> {
  return Object.fromEntries(FAULTS.map((f) => [f, active(f, now) ? (activeUntil.get(f) ?? null) : null])) as Record<
    DevFault,
    number | null
  >;
}

/** Switches faults on for the given seconds (0: off). */
export function setDevFaults(body: DevFaultsBody, now = Date.now()): Record<DevFault, number | null> {
  for (const fault of FAULTS) {
    const seconds = body[fault];
    if (seconds !== undefined) {
      activeUntil.set(fault, now + seconds * 1000);
    }
  }
  if (body.duplicateDeliveries !== undefined) {
    doubled.clear();
  }
  return devFaults(now);
}

/**
 * The name a reset asks for: one stock shard of the goods (at its next snapshot, result, pause or
 * allowlist call), or one object of its waiting room, a shard (at its next join, status or
 * configure call) or the coordinator (`hub`; at its next stats call). One object each, so
 * another's call in the meantime (the coordinator reads every stock shard) cannot take the reset
 * meant for it.
 */
export function resetName(goodsId: number, object: { stock: number } | { room: number | 'hub' }): string {
  return 'stock' in object ? `stock:${goodsId}:${object.stock}` : `room:${goodsId}:${object.room}`;
}

/** The name a reset of the guard shard that keeps `key` asks for (at its next useOnce or unban of that key). */
export function guardResetName(key: string): string {
  return `guard:${key}`;
}

/** The name a reset of the first guard shard to list its bans asks for (the operator's list asks all of them). */
export const GUARD_LIST_RESET_NAME = 'guards:list-bans';

/** The name a reset of the limits store asks for (at its next read or change of the runtime limits). */
export const LIMITS_RESET_NAME = 'limits:store';

/**
 * The name a reset of one of the edge's objects asks for, by the object's id (a guard shard,
 * the limits store or a copy, an admission gate, a metrics shard): at its next report, limits
 * read, share renewal or metrics flush (resetEdgeObjectIfAsked). The id, not the name the id was
 * made from: an instance an alarm started does not know its name (`ctx.id.name` stays undefined
 * for every call it then serves), and guard and metrics shards set alarms.
 */
export function edgeResetName(id: DurableObjectId): string {
  return `edge:${id.toString()}`;
}

/** In one of the edge's objects: throws its instance away when a reset was asked for under its id (edgeResetName). */
export function resetEdgeObjectIfAsked(ctx: DurableObjectState): void {
  // On the sale's hot calls: no name is made while no reset waits.
  if (resets.size > 0) {
    resetIfAsked(ctx, edgeResetName(ctx.id));
  }
}

/**
 * The object named resets the next time resetIfAsked runs in it. The returned function withdraws
 * the request and says whether the object took it (reset) in the meantime.
 */
export function askObjectReset(name: string): () => boolean {
  resets.add(name);
  return () => !resets.delete(name);
}

/** Whether a reset asked for under `name` still waits for its object. */
export function resetPending(name: string): boolean {
  return resets.has(name);
}

/** In an object: throws its instance away (workerd starts a new one) when a reset was asked for under its name. */
export function resetIfAsked(ctx: DurableObjectState, name: string | undefined): void {
  if (name !== undefined && resets.delete(name)) {
    ctx.abort(`${DEV_FAULT} object reset`);
  }
}

/** In the object's send path: throws while queue sends are to fail. */
export function failQueueSendIfAsked(now = Date.now()): void {
  if (active('queueSendFails', now)) {
    throw new Error(`${DEV_FAULT} queue send refused`);
  }
}

/** In the order consumer, after the Postgres write: throws while the consumer is to fail there. */
export function failAfterWriteIfAsked(now = Date.now()): void {
  if (active('consumerFailsAfterWrite', now)) {
    throw new Error(`${DEV_FAULT} consumer failed after the write`);
  }
}

/** How often a held batch looks whether the pause has ended. */
const PAUSE_POLL_MS = 10;

/** In the order consumer, first: waits while the consumer is paused (the batch stays unacked). */
export async function holdWhilePausedIfAsked(): Promise<void> {
  while (active('consumerPaused', Date.now())) {
    await sleep(PAUSE_POLL_MS);
  }
}

/** The reservation an order message names (a pack: its first order's), to double each once. */
function requestIdOf(body: unknown): string | undefined {
  const orders = typeof body === 'object' && body !== null && 'orders' in body && Array.isArray(body.orders) ? body.orders : undefined;
  const order: unknown = orders ? orders[0] : body;
  const id = typeof order === 'object' && order !== null && 'requestId' in order ? order.requestId : undefined;
  return typeof id === 'string' ? id : undefined;
}

/**
 * In the order consumer, on receipt: while duplicate deliveries are on, sends each order
 * message of the batch to the queue once more, so it is delivered a second time in a later
 * batch, as a lost ack makes a queue do.
 */
export async function deliverTwiceIfAsked(queue: Queue, messages: readonly Message<unknown>[], now = Date.now()): Promise<void> {
  if (!active('duplicateDeliveries', now)) {
    return;
  }
  if (doubled.size > DOUBLED_MAX) {
    doubled.clear();
  }
  const again = messages.filter((m) => {
    const id = requestIdOf(m.body);
    if (id === undefined || doubled.has(id)) {
      return false;
    }
    doubled.add(id);
    return true;
  });
  for (let i = 0; i < again.length; i += 100) {
    await queue.sendBatch(again.slice(i, i + 100).map((m) => ({ body: m.body, contentType: 'json' as const, delaySeconds: 1 })));
  }
  if (again.length > 0) {
    log.warn('dev_fault.delivered_twice', { messages: again.length });
  }
}
