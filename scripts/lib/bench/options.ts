// Command-line options of `npm run bench`.
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { intOption, UsageError } from '../load/options.ts';

export const BENCH_USAGE = `Usage: npm run bench [-- options]

Builds the Worker bundle, runs it under Miniflare's API against Postgres (embedded PGlite, or a
fresh database on $DATABASE_URL's server) and measures, with one load generator (autocannon)
and one connection count: a floor route, the purchase path, the sold-out path, the order
consumer beside a plain-INSERT floor, the object calls behind the capacity model, purchases
under a delay on every object call, a sharded goods, the waiting room, the classic stack (when
a redis-server and PostgreSQL answer), the targets, and the invariants afterwards.

  --duration S             seconds per phase (default 10)
  --connections N          connections of the load generator (default 100)
  --warmup S               warm-up seconds before measuring (default 3)
  --purchases N            shoppers made for the purchase phase (default: three times the warm-up's
                           purchase rate x duration, at most the floor rate x duration x 1.2)
  --consumer-messages N    orders in the consumer backlog (default 60000)
  --database-url URL       Postgres server to use (default $DATABASE_URL; unset: embedded PGlite)
  --redis-url URL          turn the Redis mirror on against this redis-server (default: off)
  --idempotency-keys       send an Idempotency-Key with every purchase, as the shopper page does
  --assets                 keep Miniflare's static-assets routing in front of the Worker
  --entry-worker           send the requests through Miniflare's entry worker, the local stand-in
                           for Cloudflare's front line, instead of to the Worker's own socket
  --services-in-process    run Postgres (PGlite) and its WebSocket bridge in the load generator's
                           process, as before they had a process of their own (default: a child
                           process, so the load generator never waits on a statement's turn)
  --objects-on-disk        keep the objects' SQLite files on disk, where workerd syncs every
                           transaction on the one thread that runs everything (default: on
                           tmpfs, /dev/shm, when the machine has it)
  --out DIR                where results go (default bench/results, ignored by git)
  --json                   print the result JSON instead of the table
  --object-delay-ms N      delay before every object call in the delay phase (default 50; 0: no phase)
  --shards N               stock shards of the sharded phase's goods (default 8; 0: no phase)
  --queue-shoppers N       shoppers in the waiting-room phase (default 4000; 0: no phase); each holds a
                           live connection, so the open-file limit (ulimit -n) must exceed N + 1,100
  --admit-per-second N     the waiting room's admissions per second (default 200: below the
                           joins' pace here, so the line holds and the room's own rate shows)
  --room-shards N          shards of the waiting room's goods (1-128; default: the goods' default, 32)
  --queue-stock-shards N   stock shards of the waiting room's goods (1-64; default 1)
  --held-reads N           shoppers' result reads held in one stock shard at once, the order consumer
                           paused, for their heap and how soon the orders answer them (default 5000;
                           0: no phase; skipped with --redis-url, whose mirror answers them at once)
  --join-with-post         queue shoppers join with POST .../queue and then open the live channel with
                           their ticket (two requests to their shard) instead of GET .../live?join=1
  --no-classic             skip the classic stack (default: run it when a redis-server, at
                           --redis-url, $REDIS_URL or redis://127.0.0.1:6379, and PostgreSQL,
                           at --database-url or postgres://postgres@127.0.0.1:5432/postgres, answer)
  --profile                CPU-profile the Worker during the purchase, sold-out, second floor and shard phases
                           (.cpuprofile files beside the result, top functions in the JSON)
  --verbose                print the Worker's log lines instead of counting them
  --help`;

export { isUsageError, UsageError } from '../load/options.ts';

/** Open files the bench needs besides its sockets (the bundle, the databases, the objects' SQLite files, logs). */
const FILES_BESIDE_SOCKETS = 1_000;

/** What `npm run bench` was asked to do. */
export type BenchOptions = ReturnType<typeof benchSettings>;

const OPTIONS = {
  duration: { type: 'string' },
  connections: { type: 'string' },
  warmup: { type: 'string' },
  purchases: { type: 'string' },
  'consumer-messages': { type: 'string' },
  'database-url': { type: 'string' },
  'redis-url': { type: 'string' },
  'idempotency-keys': { type: 'boolean' },
  assets: { type: 'boolean' },
  'entry-worker': { type: 'boolean' },
  'services-in-process': { type: 'boolean' },
  'objects-on-disk': { type: 'boolean' },
  out: { type: 'string' },
  json: { type: 'boolean' },
  verbose: { type: 'boolean' },
  profile: { type: 'boolean' },
  'object-delay-ms': { type: 'string' },
  shards: { type: 'string' },
  'queue-shoppers': { type: 'string' },
  'join-with-post': { type: 'boolean' },
  'room-shards': { type: 'string' },
  'queue-stock-shards': { type: 'string' },
  'admit-per-second': { type: 'string' },
  'held-reads': { type: 'string' },
  'no-classic': { type: 'boolean' },
  help: { type: 'boolean' },
} as const;

type Values = ReturnType<typeof parseArgs<{ options: typeof OPTIONS; strict: true }>>['values'];

/** Parses argv into the bench's settings; throws UsageError with a message for the user. */
export function parseBenchOptions(argv: string[]): { help: true } | (BenchOptions & { help?: undefined }) {
  const { values } = parseArgs({ args: argv, options: OPTIONS, strict: true });
  if (values.help) {
    return { help: true };
  }
  const settings = benchSettings(values);
  checkOpenFiles(settings, openFileLimit());
  return settings;
}

/** The soft limit on open files this process has, and workerd inherits; undefined when unlimited or unknown. */
export function openFileLimit(limits = '/proc/self/limits'): number | undefined {
  try {
    const line = readFileSync(limits, 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Max open files'));
    const soft = Number(line?.slice('Max open files'.length).trim().split(/\s+/)[0]);
    return Number.isInteger(soft) && soft > 0 ? soft : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The queue phase holds every shopper's live channel open at once, a socket each in workerd and
 * in the load generator: more shoppers than the open-file limit allows made workerd abort on
 * `accept: Too many open files` mid-phase. Refused up front instead, with what to change.
 */
export function checkOpenFiles(o: { queueShoppers: number; heldReads?: number; connections: number }, limit: number | undefined): void {
  const most = limit === undefined ? 0 : Math.max(0, limit - o.connections - FILES_BESIDE_SOCKETS);
  // The two phases run one after the other: each needs its own sockets only.
  for (const [option, open, what] of [
    ['queue-shoppers', o.queueShoppers, 'live connections'],
    ['held-reads', o.heldReads ?? 0, 'held result reads'],
  ] as const) {
    const need = open + o.connections + FILES_BESIDE_SOCKETS;
    if (open === 0 || limit === undefined || need <= limit) {
      continue;
    }
    throw new UsageError(
      `--${option} ${open} holds that many ${what} open at once, each a socket in workerd and in ` +
        `the load generator: about ${need} open files, and this shell allows ${limit} (ulimit -n). ` +
        `Raise the limit (ulimit -n ${Math.ceil(need / 1024) * 1024}) or use --${option} ${most} or fewer.`,
    );
  }
}

function benchSettings(values: Values) {
  const connections = intOption(values.connections, 'connections', 1, 10_000) ?? 100;
  return {
    durationS: intOption(values.duration, 'duration', 1, 600) ?? 10,
    connections,
    warmupS: intOption(values.warmup, 'warmup', 0, 600) ?? 3,
    purchases: intOption(values.purchases, 'purchases', connections, 2_000_000),
    // Thirty of the consumer's 2,000-row batches: with ten, one slow batch (the first, a
    // collection) moved the phase's ratio to its floor by a third on a fast machine.
    consumerMessages: intOption(values['consumer-messages'], 'consumer-messages', 100, 1_000_000) ?? 60_000,
    databaseUrl: values['database-url'] ?? (process.env.DATABASE_URL || undefined),
    redisUrl: values['redis-url'],
    idempotencyKeys: values['idempotency-keys'] ?? false,
    assets: values.assets ?? false,
    entryWorker: values['entry-worker'] ?? false,
    servicesInProcess: values['services-in-process'] ?? false,
    objectsOnDisk: values['objects-on-disk'] ?? false,
    out: values.out ?? 'bench/results',
    json: values.json ?? false,
    verbose: values.verbose ?? false,
    profile: values.profile ?? false,
    objectDelayMs: intOption(values['object-delay-ms'], 'object-delay-ms', 0, 10_000) ?? 50,
    shards: intOption(values.shards, 'shards', 0, 64) ?? 8,
    queueShoppers: intOption(values['queue-shoppers'], 'queue-shoppers', 0, 100_000) ?? 4_000,
    admitPerSecond: intOption(values['admit-per-second'], 'admit-per-second', 1, 100_000) ?? 200,
    roomShards: intOption(values['room-shards'], 'room-shards', 1, 128),
    queueStockShards: intOption(values['queue-stock-shards'], 'queue-stock-shards', 1, 64) ?? 1,
    heldReads: intOption(values['held-reads'], 'held-reads', 0, 100_000) ?? 5_000,
    joinWithPost: values['join-with-post'] ?? false,
    classic: !(values['no-classic'] ?? false),
  };
}
