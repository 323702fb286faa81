// The fault of a phase, acted out beside its crowd: the run's own servers stopped, killed,
// frozen and started again, and the Worker's dev-only switches (/admin/dev/faults, admin token) for what
// cannot be done from outside: a goods' object reset, its waiting room's objects reset, the edge's
// objects reset, queue sends failing, duplicate deliveries, the consumer failing after its write.
import type { HttpClient } from '../load/http-client.ts';
import type { FaultKind, PhasePlan } from './plan.ts';
import type { OwnPostgres, OwnServer } from './services.ts';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The body of PUT /admin/dev/faults (workers/kernel/dev-faults.ts, DevFaultsBody). */
type FaultSwitches = { queueSendFails?: number; duplicateDeliveries?: number; consumerFailsAfterWrite?: number };

const SWITCH_OF: Partial<Record<FaultKind, keyof FaultSwitches>> = {
  'queue-send-fails': 'queueSendFails',
  'duplicate-deliveries': 'duplicateDeliveries',
  'consumer-fails': 'consumerFailsAfterWrite',
};

export type FaultContext = {
  http: HttpClient;
  adminToken: string;
  goodsId: number;
  postgres: OwnPostgres;
  redis: OwnServer | undefined;
  say: (line: string) => void;
};

/**
 * What happened when: seconds into the phase; for a reset, whether every object asked took it
 * (`reset`) and how many of them a call of the sale's own traffic met first (`met`, the edge's).
 */
export type FaultLog = { events: { atS: number; what: string; reset?: boolean; met?: number }[] };

type ResetKind = 'stock' | 'room' | 'edge';
/** The edge's objects a reset asked and took, by kind (workers/http/routes/dev-faults.ts). */
type EdgeCounts = Record<string, { asked: number; reset: number; byTraffic: number }>;
/** POST /admin/dev/faults/reset's answer: whether every object took the reset, and the edge's counts. */
type ResetAnswer = { reset: boolean; edge: EdgeCounts | undefined };

/**
 * How long the sale's own calls have to meet the edge's resets before the route makes the rest
 * itself: an isolate reports to its guard shards every 0.5 s, flushes its metrics and re-reads its
 * limits copy every second, and renews its admission share every 2 s (so most resets meet one).
 */
const EDGE_WAIT_MS = 1_500;

const EDGE_KINDS: Record<string, string> = {
  guardShards: 'guard shards',
  limits: 'limits store and copies',
  admissionGate: 'admission gate',
  metricsShards: 'metrics shards',
};

/** "128 of 128 guard shards, ..." */
function describeEdge(edge: EdgeCounts | undefined): string {
  const kinds = Object.entries(edge ?? {}).map(([kind, n]) => `${n.reset} of ${n.asked} ${EDGE_KINDS[kind] ?? kind}`);
  return `${kinds.join(', ')}; the sale's calls met ${metByTraffic(edge)} first`;
}

function metByTraffic(edge: EdgeCounts | undefined): number {
  return Object.values(edge ?? {}).reduce((n, k) => n + k.byTraffic, 0);
}

async function setSwitches(c: FaultContext, switches: FaultSwitches): Promise<void> {
  const answer = await c.http.put('/admin/dev/faults', { headers: { authorization: `Bearer ${c.adminToken}` }, json: switches });
  if (answer.status !== 200) {
    throw new Error(
      `PUT /admin/dev/faults answered ${answer.status} ${answer.body.slice(0, 200)} (a dev build with DEV_MODE=true is needed)`,
    );
  }
}

async function resetObjects(c: FaultContext, objects: ResetKind[]): Promise<ResetAnswer> {
  const answer = await c.http.post('/admin/dev/faults/reset', {
    headers: { authorization: `Bearer ${c.adminToken}` },
    json: { goodsId: c.goodsId, objects, ...(objects.includes('edge') ? { edgeWaitMs: EDGE_WAIT_MS } : {}) },
  });
  if (answer.status !== 200) {
    throw new Error(`POST /admin/dev/faults/reset answered ${answer.status} ${answer.body.slice(0, 200)}`);
  }
  const body = answer.json as { reset?: unknown; edge?: EdgeCounts } | undefined;
  return { reset: body?.reset === true, edge: body?.edge };
}

/** Acts out the phase's fault on its timeline (started with the crowd); resolves once it is healed. */
export async function actFault(phase: PhasePlan, c: FaultContext): Promise<FaultLog> {
  const started = Date.now();
  const log: FaultLog = { events: [] };
  const note = (what: string, reset?: { reset: boolean; met?: number }) => {
    const atS = Math.round((Date.now() - started) / 100) / 10;
    log.events.push({ atS, what, ...reset });
    c.say(`  ${String(atS).padStart(6)} s  ${what}`);
  };
  const at = async (seconds: number) => {
    const wait = started + seconds * 1000 - Date.now();
    if (wait > 0) {
      await sleep(wait);
    }
  };
  // The phase's resets on its timeline, each noted with whether every object asked took it.
  const resets = async (objects: ResetKind[], done: string, missed: string, counts = false) => {
    for (const s of phase.resetsAtS) {
      await at(s);
      const answer = await resetObjects(c, objects);
      note(`${answer.reset ? done : missed}${counts ? ` (${describeEdge(answer.edge)})` : ''}`, {
        reset: answer.reset,
        ...(answer.edge ? { met: metByTraffic(answer.edge) } : {}),
      });
    }
  };
  const heal = phase.faultAtS + phase.faultForS;
  // Postgres made unavailable for the phase's fault, noted every minute of it, then brought back.
  type Away = { go: () => Promise<void>; gone: string; still: string; back: () => Promise<void>; returned: string };
  const postgresAway = async ({ go, gone, still, back, returned }: Away) => {
    await at(phase.faultAtS);
    await go();
    note(`PostgreSQL ${gone} in ${phase.faultForS} s`);
    for (let s = phase.faultAtS + 60; s < heal; s += 60) {
      await at(s);
      note(`PostgreSQL ${still} (${Math.round(heal - s)} s to go)`);
    }
    await at(heal);
    await back();
    note(`PostgreSQL ${returned}`);
  };
  switch (phase.fault) {
    case 'none':
      return log;
    case 'postgres-stopped':
    case 'postgres-frozen': {
      const pg = c.postgres;
      await postgresAway(
        phase.fault === 'postgres-frozen'
          ? {
              go: pg.freeze,
              gone: 'frozen (SIGSTOP, connections held open); thawed',
              still: 'still frozen',
              back: pg.thaw,
              returned: 'thawed',
            }
          : { go: pg.stop, gone: 'stopped (fast shutdown); back', still: 'still down', back: pg.start, returned: 'started again' },
      );
      return log;
    }
    case 'redis-killed':
      if (!c.redis) {
        throw new Error("phase b needs the mirror's redis-server (the run was started with --no-mirror)");
      }
      await at(phase.faultAtS);
      await c.redis.stop();
      note(`redis-server killed (SIGKILL); back in ${phase.faultForS} s, empty`);
      await at(heal);
      await c.redis.start();
      note('redis-server started again');
      return log;
    case 'object-reset':
      await resets(['stock'], "the goods' object was reset", "the goods' object had nothing in memory to lose");
      return log;
    case 'room-reset':
      await resets(
        ['room'],
        "the waiting room's objects were reset",
        "the waiting room's objects: one or more had nothing in memory to lose",
      );
      return log;
    case 'edge-reset':
      await resets(['edge'], "the edge's objects were reset", "the edge's objects: one or more did not take the reset", true);
      return log;
    default: {
      const name = SWITCH_OF[phase.fault];
      if (!name) {
        throw new Error(`no way to inject ${phase.fault}`);
      }
      await at(phase.faultAtS);
      await setSwitches(c, { [name]: phase.faultForS });
      note(`${name} on for ${phase.faultForS} s`);
      await at(heal);
      await setSwitches(c, { [name]: 0 });
      note(`${name} off`);
      return log;
    }
  }
}
