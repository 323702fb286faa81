// The capacity model: from measured object calls per purchase and the documented limit of one
// Durable Object (about 1,000 requests a second), how many purchases a second one goods
// sustains with 1, 8, 16 and 64 stock shards, and which object class runs out first. Pure:
// bench.ts gives it the counts and CPU times it measured. docs/performance.md explains it.
import { round } from '../load/metrics.ts';
import type { ClassCalls } from './objects.ts';

/** Requests a second one Durable Object serves (Cloudflare's documented soft limit). */
export const OBJECT_LIMIT_PER_SEC = 1_000;
export const MODEL_SHARDS = [1, 8, 16, 64] as const;
/** The target: one goods at this rate on 16 shards, no object above HOT_OBJECT_PER_SEC. */
export const TARGET_PURCHASES_PER_SEC = 10_000;
export const HOT_OBJECT_PER_SEC = 500;
/**
 * Objects of the fixed-size classes (durable-objects/routing.ts GUARD_SHARDS, LIMITS_REPLICAS and
 * METRICS_SHARDS, kernel ROOM_SHARDS; copied, the objects' modules need the Workers types, and
 * checked against them by test/node/bench-model.unit.test.ts).
 */
const GUARD_SHARDS = 128;
const ROOM_SHARDS = 32;
/** The isolates read the limits from these copies, not from the store (which hears from the copies and the admin). */
const LIMITS_REPLICAS = 16;
/** Each isolate flushes its metrics to one of these. */
const METRICS_SHARDS = 32;

/** How many objects of a class one goods' purchases spread over, with `shards` stock shards. */
export function objectsPerGoods(cls: string, shards: number): number {
  switch (cls) {
    case 'GoodsStock':
      return shards;
    case 'EdgeGuard':
      return GUARD_SHARDS;
    case 'WaitingRoom':
      return ROOM_SHARDS;
    case 'LimitsStore':
      return LIMITS_REPLICAS;
    case 'Metrics':
      return METRICS_SHARDS;
    default:
      // AdmissionGate and the room's hub: one of each.
      return 1;
  }
}

/** Per class: calls per purchase as measured (batched) and as production makes them (see productionCalls). */
export type ClassInputs = {
  cls: string;
  callsPerPurchase: number;
  requestsPerPurchase: number;
  cpuMsPerCall: number | null;
};
export type Ceiling = { purchasesPerSec: number | null; limitedBy: string | null };
export type Scenario = {
  shards: number;
  /** Counting each call the bench saw (group commit batches an isolate's requests). */
  measured: Ceiling;
  /** Counting one call per request, as production's many isolates make them. */
  production: Ceiling;
  /** Calls a second each object of a class takes when the goods sells TARGET_PURCHASES_PER_SEC (production count). */
  perObjectAtTarget: Record<string, number>;
};
export type CapacityModel = {
  limitPerObject: number;
  purchases: number;
  inputs: ClassInputs[];
  scenarios: Scenario[];
};

/**
 * Classes an isolate calls on a timer, not per purchase (the limits copy every second or two,
 * the metrics flush, the admission share renewed every 2 s in the background): their calls
 * grow with isolates and time, not with purchases, so the production count leaves them out;
 * docs/performance.md ("Object calls at fleet scale") gives what each object takes per isolate.
 */
export const PERIODIC_CLASSES = new Set(['LimitsStore', 'Metrics', 'AdmissionGate']);

/** Calls per purchase in production: one per request each call carried; none for timers. */
function productionCalls(cls: string, items: number, purchases: number): number {
  if (PERIODIC_CLASSES.has(cls) || purchases <= 0) {
    return 0;
  }
  return round(items / purchases, 4);
}

/** The model's inputs from one stretch of counted calls. */
export function modelInputs(calls: ClassCalls, purchases: number, cpuMs: Record<string, number> = {}): ClassInputs[] {
  return Object.entries(calls)
    .filter(([, c]) => c.calls > 0)
    .map(([cls, c]) => ({
      cls,
      callsPerPurchase: purchases > 0 ? round(c.calls / purchases, 4) : 0,
      requestsPerPurchase: productionCalls(cls, c.items, purchases),
      cpuMsPerCall: cpuMs[cls] !== undefined ? round((cpuMs[cls] ?? 0) / c.calls, 3) : null,
    }))
    .sort((a, b) => b.requestsPerPurchase - a.requestsPerPurchase);
}

function ceiling(inputs: ClassInputs[], shards: number, per: (i: ClassInputs) => number): Ceiling {
  let best: Ceiling = { purchasesPerSec: null, limitedBy: null };
  for (const i of inputs) {
    const n = per(i);
    if (n <= 0) {
      continue;
    }
    const rate = (OBJECT_LIMIT_PER_SEC * objectsPerGoods(i.cls, shards)) / n;
    if (best.purchasesPerSec === null || rate < best.purchasesPerSec) {
      best = { purchasesPerSec: Math.round(rate), limitedBy: i.cls };
    }
  }
  return best;
}

/** Purchases a second per goods at each shard count: min over classes of limit x objects / calls per purchase. */
export function capacityModel(inputs: ClassInputs[], purchases: number): CapacityModel {
  return {
    limitPerObject: OBJECT_LIMIT_PER_SEC,
    purchases,
    inputs,
    scenarios: MODEL_SHARDS.map((shards) => ({
      shards,
      measured: ceiling(inputs, shards, (i) => i.callsPerPurchase),
      production: ceiling(inputs, shards, (i) => i.requestsPerPurchase),
      perObjectAtTarget: Object.fromEntries(
        inputs.map((i) => [i.cls, round((TARGET_PURCHASES_PER_SEC * i.requestsPerPurchase) / objectsPerGoods(i.cls, shards))]),
      ),
    })),
  };
}

/**
 * Object calls a purchase waited on one after another, read from how much later the delayed
 * phase answered than the undelayed one, at one percentile. Never below 0: at 100 connections
 * the undelayed phase's own queueing can make it the slower of the two, which says nothing
 * about calls.
 */
export function callsWaited(delayedMs: number, undelayedMs: number, delayMs: number): number {
  return round(Math.max(0, delayedMs - undelayedMs) / delayMs, 2);
}
