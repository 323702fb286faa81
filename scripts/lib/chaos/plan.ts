// What `npm run chaos` runs: its options, the two profiles (full and --short), each phase's
// sale and fault, and the retry schedule the Worker and the queues run with. Pure, so the
// schedule it prints is the one it computes from.
import { parseArgs } from 'node:util';
import { backoffSeconds } from '../../../workers/kernel/backoff.ts';
import { DEFAULT_RETRY_SCHEDULE } from '../../../workers/kernel/retry-schedule.ts';
import { MIRROR_RETRY_CAP_SECONDS } from '../../../workers/mirror/sync.ts';
import { intOption } from '../load/options.ts';

export const CHAOS_USAGE = `Usage: npm run chaos [-- options]

Starts the Worker (the built bundle under Miniflare) on a PostgreSQL cluster and a redis-server
of its own, runs a sale of a few thousand shoppers (honest ones, lost answers retried with the
same Idempotency-Key, hostile requests), injects one fault per phase, waits until everything is
quiet, and prints a table per fault and the invariants of DESIGN.md. Exit status 0 when every
invariant holds, 1 when one breaks, 2 when the run could not be made.

  --short          the CI profile: fewer shoppers, a shortened retry schedule, under 3 minutes
                   (default: the full profile, about 20 minutes, production's schedule)
  --only KEYS      run only these phases, e.g. --only a,c (keys: 0 a b c d e f g p r; --short
                   runs p only when named here)
  --shards N       spread each phase's goods over N stock shards, 1-64 (default 1): the faults
                   then meet grants and give-backs between shards as well as reservations
  --no-mirror      run without the Redis mirror (no redis-server, no phase b): every result
                   read then goes to the stock shard, which holds it until the order is written,
                   so the faults meet held reads where the mirror would answer QUEUED at once
  --json FILE      also write the whole result as JSON to FILE
  --verbose        print the Worker's warnings as they happen
  --help`;

export type Mode = 'full' | 'short';

export type FaultKind =
  | 'none'
  | 'postgres-stopped'
  | 'postgres-frozen'
  | 'redis-killed'
  | 'object-reset'
  | 'room-reset'
  | 'edge-reset'
  | 'queue-send-fails'
  | 'duplicate-deliveries'
  | 'consumer-fails';

/** One phase: its own goods, its crowd, and one fault in the middle of its sale. */
export type PhasePlan = {
  key: string;
  fault: FaultKind;
  title: string;
  stock: number;
  /** Honest shoppers arriving evenly over the selling window; more of them than units. */
  buyers: number;
  /** Shoppers arriving after the selling window (most meet SOLD_OUT), until the phase ends. */
  latecomers: number;
  /** Shoppers who were accepted and try again with a new token and key. */
  again: number;
  /** Hostile requests spread over the phase. */
  hostile: number;
  sellS: number;
  lengthS: number;
  faultAtS: number;
  /** How long the fault lasts; 0 for a fault that is one act (a reset). */
  faultForS: number;
  /** Object resets, seconds into the phase. */
  resetsAtS: number[];
  /** The goods' waiting room, always on: every shopper joins its line and buys with the pass it is let in with. */
  queue?: { admitPerSecond: number; shards: number };
  /**
   * `activity`: the goods' rule of one live order per shopper across its activity, which the
   * token route answers from the edge's copy of the activity's holders (Postgres out of the way,
   * through its outage too).
   */
  limitScope?: 'activity';
};

export type QueueSettings = { maxRetries: number; retryDelay?: number | undefined };
/** The queue consumers' settings by role, as wrangler.toml's [[queues.consumers]] of an environment give them. */
export type QueueSchedule = { orders: QueueSettings; deadLetters: QueueSettings; timeouts: QueueSettings };

export type Schedule = QueueSchedule & {
  /** The order-safety settings given to the Worker as bindings; absent ones keep the Worker's defaults. */
  bindings: Record<string, string>;
  /** The backoff cap the order consumer retries with (RETRY_BACKOFF_CAP_SECONDS, or the kernel's default). */
  backoffCapSeconds: number;
  /** From a message's first failed delivery to its last retry on the order queue. */
  ordersRetriesLastS: number;
  cronEveryMs: number;
};

export type ChaosPlan = {
  mode: Mode;
  phases: PhasePlan[];
  schedule: Schedule;
  pollMs: number;
  /** Share of accepted purchases sent again with the same key (a lost answer). */
  retryShare: number;
  maxInFlight: number;
  quietTimeoutS: number;
  /** Seconds without an order batch before the run calls the queues drained. */
  calmS: number;
  payTimeoutSeconds: number;
  /** Stock shards of every phase's goods. */
  shards: number;
  /** Whether the Worker runs with its Redis mirror (on a redis-server of the run's own). */
  mirror: boolean;
};

export type ChaosOptions = {
  mode: Mode;
  only: string[] | undefined;
  shards: number;
  mirror: boolean;
  json: string | undefined;
  verbose: boolean;
  help: boolean;
};

/** The kernel's default cap of backoffSeconds (workers/kernel/backoff.ts). */
const KERNEL_BACKOFF_CAP = 300;

/**
 * Seconds a fault must last to outlast a retry schedule that doubles from 1 s up to `capS` and
 * then retries every `capS` for good: every doubling step, then two tries at the cap.
 */
export function pastCapSeconds(capS: number): number {
  let total = 0;
  for (let attempt = 1; backoffSeconds(attempt, capS) < capS; attempt++) {
    total += backoffSeconds(attempt, capS);
  }
  return total + 2 * capS;
}

export function parseChaosOptions(argv: string[]): ChaosOptions {
  const { values } = parseArgs({
    args: argv,
    options: {
      short: { type: 'boolean' },
      only: { type: 'string' },
      shards: { type: 'string' },
      'no-mirror': { type: 'boolean' },
      json: { type: 'string' },
      verbose: { type: 'boolean' },
      help: { type: 'boolean' },
    },
    strict: true,
    allowPositionals: false,
  });
  const only = values.only?.split(',').map((k) => k.trim());
  if (only?.some((k) => !/^[0a-gpr]$/.test(k))) {
    throw new Error(`--only takes phase keys among 0 a b c d e f g p r, got ${values.only}`);
  }
  const shards = intOption(values.shards, 'shards', 1, 64) ?? 1;
  const mirror = !values['no-mirror'];
  if (!mirror && only?.includes('b')) {
    throw new Error("phase b kills the mirror's redis-server: it cannot run with --no-mirror");
  }
  return {
    mode: values.short ? 'short' : 'full',
    only,
    shards,
    mirror,
    json: values.json,
    verbose: values.verbose ?? false,
    help: values.help ?? false,
  };
}

/** Seconds from a message's first failure to its last retry: max_retries retries, each after backoffSeconds(attempt, cap). */
export function retriesLastSeconds(maxRetries: number, capSeconds: number): number {
  let total = 0;
  for (let attempt = 1; attempt <= maxRetries; attempt++) {
    total += backoffSeconds(attempt, capSeconds);
  }
  return total;
}

type Crowd = Pick<PhasePlan, 'stock' | 'buyers' | 'latecomers' | 'again' | 'hostile' | 'sellS' | 'lengthS'>;

function phases(crowd: Crowd, faults: Record<FaultKind, Partial<PhasePlan>>): PhasePlan[] {
  const titles: [string, FaultKind, string][] = [
    ['0', 'none', 'no fault (baseline)'],
    ['a', 'postgres-stopped', 'Postgres stopped'],
    ['b', 'redis-killed', 'redis-server killed and restarted'],
    ['c', 'object-reset', "the goods' object reset"],
    ['d', 'queue-send-fails', 'queue sends failing'],
    ['e', 'duplicate-deliveries', 'every order message delivered twice'],
    ['f', 'consumer-fails', 'consumer failing after its write'],
    ['g', 'edge-reset', "the edge's objects reset"],
    ['p', 'postgres-frozen', 'Postgres frozen, its connections held open'],
    ['r', 'room-reset', "the waiting room's objects reset"],
  ];
  return titles.map(([key, fault, title]) => ({ key, fault, title, ...crowd, faultAtS: 0, faultForS: 0, resetsAtS: [], ...faults[fault] }));
}

/** The profile of a mode; `production` is wrangler.toml's production queue consumers, the full run's schedule. */
export function chaosPlan(mode: Mode, production: QueueSchedule, only?: string[], shards = 1, mirror = true): ChaosPlan {
  const plan = { ...(mode === 'full' ? fullPlan(production) : shortPlan()), shards, mirror };
  // Without the mirror there is no redis-server to kill.
  const phases = plan.phases.filter(
    (p) => (only ? only.includes(p.key) : mode === 'full' || !SHORT_WHEN_ASKED.includes(p.fault)) && (mirror || p.fault !== 'redis-killed'),
  );
  return { ...plan, phases };
}

function fullPlan(production: QueueSchedule): Omit<ChaosPlan, 'shards' | 'mirror'> {
  const crowd = { stock: 50, buyers: 60, latecomers: 280, again: 20, hostile: 70, sellS: 40, lengthS: 75 };
  // Longer than the order queue's retries (8, up to 128 s apart: about 4 minutes) by far.
  const outageS = 630;
  // The mirror's writes and the outbox's queue sends retry for good, 1 s doubling up to a cap
  // (a minute each by default): these outages reach the cap and are retried at it twice.
  const redisDownS = pastCapSeconds(MIRROR_RETRY_CAP_SECONDS);
  const sendsFailS = pastCapSeconds(DEFAULT_RETRY_SCHEDULE.outboxRetryCapSeconds);
  return {
    mode: 'full',
    phases: phases(crowd, {
      none: {},
      // Its sale under the activity rule: the tickets of the shoppers who come during the outage are answered at the edge.
      'postgres-stopped': { faultAtS: 15, faultForS: outageS, lengthS: 15 + outageS + 30, limitScope: 'activity' },
      // The same length, but nothing is refused: every call to Postgres waits for an answer.
      'postgres-frozen': { faultAtS: 15, faultForS: outageS, lengthS: 15 + outageS + 30, limitScope: 'activity' },
      'redis-killed': { faultAtS: 15, faultForS: redisDownS, lengthS: 15 + redisDownS + 30 },
      'object-reset': { resetsAtS: [5, 10, 15, 20, 25, 30, 35] },
      // Its shards and coordinator, while the crowd waits in the line, is let in and buys.
      'room-reset': { resetsAtS: [5, 10, 15, 20, 25, 30, 35], queue: { admitPerSecond: 2, shards: 4 } },
      // Every guard shard, the limits store and copies, the goods' gate and every metrics shard.
      'edge-reset': { resetsAtS: [5, 10, 15, 20, 25, 30, 35] },
      'queue-send-fails': { faultAtS: 10, faultForS: sendsFailS, lengthS: 10 + sendsFailS + 30 },
      'duplicate-deliveries': { faultAtS: 5, faultForS: 45 },
      'consumer-fails': { faultAtS: 10, faultForS: 30 },
    }),
    schedule: {
      ...production,
      bindings: {},
      backoffCapSeconds: KERNEL_BACKOFF_CAP,
      ordersRetriesLastS: retriesLastSeconds(production.orders.maxRetries, KERNEL_BACKOFF_CAP),
      cronEveryMs: 60_000,
    },
    pollMs: 2_000,
    retryShare: 0.2,
    maxInFlight: 40,
    quietTimeoutS: 420,
    calmS: 15,
    payTimeoutSeconds: 3_600,
  };
}

/**
 * Phases of the short profile that run only when --only names them: CI runs them in its second,
 * shorter run (over stock shards), beside the first, so the runs end together.
 */
const SHORT_WHEN_ASKED: readonly FaultKind[] = ['postgres-frozen'];

function shortPlan(): Omit<ChaosPlan, 'shards' | 'mirror'> {
  const crowd = { stock: 20, buyers: 24, latecomers: 50, again: 6, hostile: 20, sellS: 7, lengthS: 10 };
  const cap = 4;
  const orders = { maxRetries: 3 };
  // One retry on the dead-letter queue (the consumer picks its delay while Postgres is down),
  // then the queue drops the message: only the Worker itself can still make it an order.
  const deadLetters = { maxRetries: 1, retryDelay: 1 };
  const ordersRetriesLastS = retriesLastSeconds(orders.maxRetries, cap);
  // Longer than the order queue's 7 s of retries and the dead-letter queue's one retry (at most 30 s later).
  const outageS = 40;
  const phaseList = phases(crowd, {
    none: {},
    'postgres-stopped': { faultAtS: 3, faultForS: outageS, lengthS: 3 + outageS + 4, limitScope: 'activity' },
    // As long as the outage: past the statements' 10 s deadline and the consumer's retries.
    'postgres-frozen': { faultAtS: 3, faultForS: outageS, lengthS: 3 + outageS + 4, limitScope: 'activity' },
    'redis-killed': { faultAtS: 3, faultForS: 3 },
    'object-reset': { resetsAtS: [1.5, 3, 4.5, 6] },
    // The line holds the crowd (about 3 joins a second, then the latecomers' burst, for 4 a
    // second let in) while its shards and coordinator are reset.
    'room-reset': { resetsAtS: [2, 4, 6, 8], queue: { admitPerSecond: 4, shards: 3 } },
    // From the first second to the last of the selling window: reports, limits reads, the
    // gate's renewals and metrics flushes meet new instances while the units sell.
    'edge-reset': { resetsAtS: [0.5, 2.5, 4.5, 6.5] },
    // Past the outbox's 4 s cap: its sends are retried at the cap before they go through.
    'queue-send-fails': { faultAtS: 2, faultForS: pastCapSeconds(cap), lengthS: 2 + pastCapSeconds(cap) + 4 },
    'duplicate-deliveries': { faultAtS: 1, faultForS: 7 },
    // Shorter than the order queue's retries, so each message still gets a delivery after it.
    'consumer-fails': { faultAtS: 2, faultForS: Math.min(4, ordersRetriesLastS - 2) },
  }).filter((p) => p.fault !== 'none');
  return {
    mode: 'short',
    phases: phaseList,
    schedule: {
      orders,
      deadLetters,
      timeouts: { maxRetries: 3 },
      // The order-safety settings (.dev.vars.example): consumers and the outbox retry within
      // seconds, and an accepted reservation not settled after 5 s is sent again.
      bindings: {
        RETRY_BACKOFF_CAP_SECONDS: String(cap),
        OUTBOX_RETRY_CAP_SECONDS: String(cap),
        OUTBOX_RESEND_SECONDS: '5',
        OUTBOX_RESEND_CAP_SECONDS: '10',
      },
      backoffCapSeconds: cap,
      ordersRetriesLastS,
      cronEveryMs: 10_000,
    },
    pollMs: 1_000,
    retryShare: 0.2,
    maxInFlight: 30,
    quietTimeoutS: 30,
    calmS: 3,
    payTimeoutSeconds: 3_600,
  };
}

/** The lines that say which schedule this run uses. */
export function describeSchedule(plan: ChaosPlan): string[] {
  const s = plan.schedule;
  const delay = (q: QueueSettings) => (q.retryDelay === undefined ? 'the delay the consumer asks for' : `retry_delay ${q.retryDelay} s`);
  const bindings = Object.entries(s.bindings).map(([k, v]) => `${k}=${v}`);
  const outage = plan.phases.find((p) => p.fault === 'postgres-stopped');
  const frozen = plan.phases.find((p) => p.fault === 'postgres-frozen');
  const redis = plan.phases.find((p) => p.fault === 'redis-killed');
  const sends = plan.phases.find((p) => p.fault === 'queue-send-fails');
  const outboxCap = s.bindings.OUTBOX_RETRY_CAP_SECONDS ?? String(DEFAULT_RETRY_SCHEDULE.outboxRetryCapSeconds);
  return [
    `schedule (${plan.mode === 'full' ? "production's queue settings, wrangler.toml [env.production]" : 'shortened for CI'}):`,
    `  order queue:       max_retries ${s.orders.maxRetries}, backoff 1, 2, 4, ... s capped at ${s.backoffCapSeconds} s: retries end ${s.ordersRetriesLastS} s after the first failure`,
    `  dead-letter queue: max_retries ${s.deadLetters.maxRetries}, ${delay(s.deadLetters)} (the consumer picks its own delay while Postgres is down)`,
    `  timeout queue:     max_retries ${s.timeouts.maxRetries}`,
    `  Worker settings:   ${bindings.length > 0 ? bindings.join(', ') : "the Worker's defaults"}`,
    `  cron:              every ${s.cronEveryMs / 1000} s${s.cronEveryMs === 60_000 ? ', on the minute, as in production' : ''}`,
    ...(plan.mirror ? [] : ['  Redis mirror:      off (result reads held by the stock shards; no phase b)']),
    ...(outage ? [`  Postgres outage:   ${outage.faultForS} s`] : []),
    ...(frozen ? [`  Postgres frozen:   ${frozen.faultForS} s`] : []),
    ...(redis
      ? [`  Redis down:        ${redis.faultForS} s (mirror writes retry 1 s doubling, then every ${MIRROR_RETRY_CAP_SECONDS} s)`]
      : []),
    ...(sends ? [`  queue sends fail:  ${sends.faultForS} s (the outbox retries 1 s doubling, then every ${outboxCap} s)`] : []),
  ];
}
