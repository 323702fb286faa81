import { Hono } from 'hono';
import {
  admissionGate,
  allGuardShards,
  allLimitsReplicas,
  allMetricsShards,
  allStockShards,
  limitsStore,
  roomHub,
  roomShard,
} from '../../../durable-objects/routing';
import { banPolicy } from '../../edge/client-guard';
import { getGoods } from '../../edge/goods-cache';
import { currentLimits } from '../../edge/limits';
import { roomGoodsOf } from '../../edge/waiting-room';
import type { GoodsPlacement } from '../../kernel/contract';
import {
  askObjectReset,
  DEV_FAULT,
  DevFaultsBody,
  DevResetBody,
  devFaults,
  edgeResetName,
  resetName,
  resetPending,
  setDevFaults,
} from '../../kernel/dev-faults';
import { AppError } from '../../kernel/errors';
import { log } from '../../kernel/log';
import { ObjectCallsBody, objectCalls, setObjectCalls } from '../../kernel/object-calls';
import { sleep } from '../../kernel/sleep';
import type { AppEnv } from '../context';
import { adminAuth } from '../middleware/admin-auth';
import { valid } from '../middleware/validate';

/**
 * Fault switches for the local chaos run (scripts/chaos.ts): admin token, DEV_MODE, and dev
 * builds only (app.ts mounts it behind the build flag; see workers/kernel/dev-faults.ts).
 */
export const devFaultRoutes = new Hono<AppEnv>()
  .use(async function devFaultsOnly(c, next) {
    if (!c.get('config').devMode) {
      throw new AppError('NOT_FOUND', 'not found');
    }
    await next();
  }, adminAuth)

  .get('/', (c) => c.json(devFaults()))

  // Durable Object calls counted by class and method, and a delay on each (the bench's model).
  .get('/object-calls', (c) => c.json(objectCalls()))

  .put('/object-calls', valid('json', ObjectCallsBody), (c) => {
    const body = c.req.valid('json');
    log.warn('dev_fault.object_calls', { requestId: c.get('traceId'), ...body });
    return c.json(setObjectCalls(body));
  })

  .put('/', valid('json', DevFaultsBody), (c) => {
    const body = c.req.valid('json');
    log.warn('dev_fault.set', { requestId: c.get('traceId'), ...body });
    return c.json(setDevFaults(body));
  })

  // The goods' objects throw away their in-memory state, as an eviction or a crash would: every
  // stock shard (`stock`, the default), every shard and the coordinator of its waiting room
  // (`room`), and the edge's objects its sale leans on (`edge`; `edgeWaitMs` gives the sale's own
  // calls that long to meet their resets). The next call to each meets a new instance that has
  // only what was in storage.
  .post('/reset', valid('json', DevResetBody), async (c) => {
    const { goodsId, objects = ['stock'], edgeWaitMs } = c.req.valid('json');
    const goods = await getGoods(c.get('config'), goodsId);
    const calls: [string, () => Promise<unknown>][] = [];
    if (objects.includes('stock')) {
      allStockShards(c.env, goods).forEach((stub, shard) => {
        calls.push([resetName(goodsId, { stock: shard }), () => stub.snapshot()]);
      });
    }
    if (objects.includes('room')) {
      const room = roomGoodsOf(goods);
      if (room.mode === 'off') {
        throw new AppError('INVALID_INPUT', 'the goods has no waiting room to reset');
      }
      for (let shard = 0; shard < room.shards; shard++) {
        calls.push([resetName(goodsId, { room: shard }), () => roomShard(c.env, goods, shard).configure(room, shard)]);
      }
      calls.push([resetName(goodsId, { room: 'hub' }), () => roomHub(c.env, goods).roomStats(room)]);
    }
    let reset = true;
    // One object at a time, each asked by its own name; a shopper's call may meet it first.
    for (const [name, look] of calls) {
      reset &&= await resetOne(name, look);
    }
    const edge = objects.includes('edge') ? await resetEdge(c.env, goods, edgeWaitMs ?? 0) : undefined;
    if (edge) {
      reset &&= Object.values(edge).every((kind) => kind.reset === kind.asked);
    }
    log.warn('dev_fault.object_reset', { requestId: c.get('traceId'), goodsId, objects, reset, ...(edge ? { edge } : {}) });
    return c.json({ goodsId, objects, reset, ...(edge ? { edge } : {}) });
  });

/** Asks `name` to reset and makes the call that meets it (`look`); whether the object took it, by that call or another. */
async function resetOne(name: string, look: () => Promise<unknown>): Promise<boolean> {
  const taken = askObjectReset(name);
  await meet(name, look);
  return taken();
}

/** Makes the call that meets a reset; it fails with the reset's reason when it is the one that does. */
async function meet(name: string, look: () => Promise<unknown>): Promise<void> {
  try {
    await look();
  } catch (error) {
    if (!(error instanceof Error && error.message.startsWith(DEV_FAULT))) {
      log.warn('dev_fault.reset_call_failed', { name, error });
    }
  }
}

/** The caller a reset's own calls name where an object asks who calls (a report's isolate, a share's). */
const DEV_RESET_CALLER = 'dev-reset';
/** How often a reset waiting for the sale's calls looks whether they came. */
const EDGE_WAIT_POLL_MS = 50;

type EdgeKind = 'guardShards' | 'limits' | 'admissionGate' | 'metricsShards';
/** Per kind: objects asked, objects that took the reset, and of those, the ones a call of the sale's traffic met first. */
type EdgeCount = { asked: number; reset: number; byTraffic: number };

/**
 * Resets the edge's objects a sale leans on, each by its own id at the call the sale's traffic
 * makes to it: every guard shard (an isolate's report), the limits store and every copy (a
 * read), the goods' admission gate (a share's renewal) and every metrics shard (a flush). The
 * sale's own calls have `waitMs` to meet the resets (those calls then fail as a real eviction
 * fails them); the route makes the call to every object still waiting. Its calls carry nothing
 * (an empty report, no demand and no rate, an empty delta), so one that a shopper's call beat
 * to the reset changes next to nothing (the gate counts a caller without demand until its share
 * lapses). All at once: each object is asked by its own id.
 */
async function resetEdge(env: Env, goods: GoodsPlacement, waitMs: number): Promise<Record<EdgeKind, EdgeCount>> {
  const policy = banPolicy(await currentLimits(env));
  const nothing = { counters: [], histograms: [] };
  const store = limitsStore(env);
  const gate = admissionGate(env, goods);
  const kinds: Record<EdgeKind, { stub: { id: DurableObjectId }; look: () => Promise<unknown> }[]> = {
    guardShards: allGuardShards(env).map((stub) => ({ stub, look: () => stub.account({ isolate: DEV_RESET_CALLER, policy, keys: [] }) })),
    limits: [
      ...allLimitsReplicas(env).map((stub) => ({ stub, look: () => stub.replicaLimits() })),
      { stub: store, look: () => store.getLimits() },
    ],
    admissionGate: [{ stub: gate, look: () => gate.share(DEV_RESET_CALLER, 0, 0) }],
    metricsShards: allMetricsShards(env).map((stub) => ({ stub, look: () => stub.add(nothing) })),
  };
  const asked = (Object.keys(kinds) as EdgeKind[]).flatMap((kind) =>
    kinds[kind].map(({ stub, look }) => {
      const name = edgeResetName(stub.id);
      return { kind, name, look, taken: askObjectReset(name) };
    }),
  );
  const deadline = Date.now() + waitMs;
  while (Date.now() < deadline && asked.some((a) => resetPending(a.name))) {
    await sleep(EDGE_WAIT_POLL_MS);
  }
  const waiting = new Set(asked.filter((a) => resetPending(a.name)).map((a) => a.name));
  await Promise.all(asked.filter((a) => waiting.has(a.name)).map((a) => meet(a.name, a.look)));
  const none = (): EdgeCount => ({ asked: 0, reset: 0, byTraffic: 0 });
  const counts: Record<EdgeKind, EdgeCount> = { guardShards: none(), limits: none(), admissionGate: none(), metricsShards: none() };
  for (const a of asked) {
    const count = counts[a.kind];
    count.asked++;
    count.byTraffic += waiting.has(a.name) ? 0 : 1;
    count.reset += a.taken() ? 1 : 0;
  }
  return counts;
}
