import { Redis } from '@upstash/redis/cloudflare';
import { count } from '../metrics/registry';
import { goodsKey, type ParsedResult, parseResult, resultKey, resultOwnerKey, stockKey, stockPartsKey, usersKey } from './keys';
import { type MirrorOp, pipelines } from './plan';

// The Upstash client, wrapped so Redis can never slow a shopper down: every call has a short
// deadline, and after a failure the mirror is skipped for a while (a circuit breaker) so an
// outage costs one timeout, not one per request. Callers treat every failure as "no mirror"
// and go to the Durable Object, which is the source of truth.

export type RedisConfig = { url: string; token: string };

/** Shopper-facing reads give up after this long and fall back to the object. */
export const READ_TIMEOUT_MS = 300;
/** Writes happen off the request path; they may take a little longer. */
export const WRITE_TIMEOUT_MS = 1_000;
/**
 * Reads for an operator (the stats, the metrics scrape) ask Redis even while the breaker is
 * open and wait this long: they are what says whether the mirror is reachable and right, and a
 * shopper's read that failed a moment ago in the same isolate must not answer for them.
 */
export const OPERATOR_READ = { timeoutMs: 2_000, force: true } as const;
const BREAKER_BASE_MS = 1_000;
const BREAKER_MAX_MS = 30_000;

type Breaker = { failures: number; openUntil: number };
const breakers = new Map<string, Breaker>();

function breaker(config: RedisConfig): Breaker {
  let b = breakers.get(config.url);
  if (!b) {
    b = { failures: 0, openUntil: 0 };
    breakers.set(config.url, b);
  }
  return b;
}

/** When the breaker for this Redis lets calls through again (0 = it does now). */
export function mirrorRetryAt(config: RedisConfig, now = Date.now()): number {
  const b = breaker(config);
  return b.openUntil > now ? b.openUntil : 0;
}

/** Thrown instead of calling Redis while the breaker is open. */
export class MirrorSkipped extends Error {
  constructor(readonly until: number) {
    super('the Redis mirror is considered down; skipped');
    this.name = 'MirrorSkipped';
  }
}

function client(config: RedisConfig, timeoutMs: number): Redis {
  return new Redis({
    url: config.url,
    token: config.token,
    // Values stay strings (a user id "123" must not come back as a number).
    automaticDeserialization: false,
    enableTelemetry: false,
    enableAutoPipelining: false,
    // A retry would only add latency; the mirror is repaired later instead.
    retry: { retries: 0 },
    // A function, so each request gets a fresh deadline and an abort throws instead of
    // answering with a made-up value.
    signal: () => AbortSignal.timeout(timeoutMs),
  });
}

type Options = { timeoutMs?: number; force?: boolean };

/** Runs `work` against Redis behind the breaker; `force` tries even while it is open. */
async function guarded<T>(config: RedisConfig, options: Options, work: (redis: Redis) => Promise<T>): Promise<T> {
  const b = breaker(config);
  const now = Date.now();
  if (!options.force && b.openUntil > now) {
    throw new MirrorSkipped(b.openUntil);
  }
  try {
    const result = await work(client(config, options.timeoutMs ?? READ_TIMEOUT_MS));
    b.failures = 0;
    b.openUntil = 0;
    return result;
  } catch (error) {
    b.failures++;
    b.openUntil = Date.now() + Math.min(BREAKER_MAX_MS, BREAKER_BASE_MS * 2 ** Math.min(10, b.failures - 1));
    throw error;
  }
}

function outcomeOf(error: unknown): 'skipped' | 'error' {
  return error instanceof MirrorSkipped ? 'skipped' : 'error';
}

/** Sets a shard's part of the stock and the goods' total to the sum of the parts, in one step. */
const STOCK_PART_SCRIPT = `redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local total = 0
for _, v in ipairs(redis.call('HVALS', KEYS[1])) do total = total + tonumber(v) end
redis.call('SET', KEYS[2], tostring(total))
return total`;

/** Sends mirror commands as pipelines, in order. Throws if any of them fails. */
export async function writeMirror(config: RedisConfig, ops: MirrorOp[], options: Options = {}): Promise<void> {
  if (ops.length === 0) {
    return;
  }
  const operation = options.force ? 'repair' : 'write';
  try {
    await guarded(config, { timeoutMs: WRITE_TIMEOUT_MS, ...options }, async (redis) => {
      for (const batch of pipelines(ops)) {
        const p = redis.pipeline();
        for (const op of batch) {
          switch (op.op) {
            case 'set':
              p.set(op.key, op.value);
              break;
            case 'hset':
              p.hset(op.key, op.fields);
              break;
            case 'setex':
              if (op.onlyIfAbsent) {
                p.set(op.key, op.value, { ex: op.seconds, nx: true });
              } else {
                p.set(op.key, op.value, { ex: op.seconds });
              }
              break;
            case 'sadd': {
              const [first, ...rest] = op.members;
              if (first !== undefined) {
                p.sadd(op.key, first, ...rest);
              }
              break;
            }
            case 'srem':
              p.srem(op.key, ...op.members);
              break;
            case 'del':
              p.del(op.key);
              break;
            case 'rename':
              p.rename(op.from, op.to);
              break;
            case 'stockpart':
              p.eval(STOCK_PART_SCRIPT, [op.parts, op.key], [op.field, op.value]);
              break;
          }
        }
        await p.exec();
      }
    });
    count('seckill_mirror_operations_total', { operation, outcome: 'ok' });
  } catch (error) {
    count('seckill_mirror_operations_total', { operation, outcome: outcomeOf(error) });
    throw error;
  }
}

function toStock(value: unknown): number | null {
  if (typeof value !== 'string' || !/^-?\d{1,12}$/.test(value)) {
    return null;
  }
  return Number(value);
}

/**
 * Remaining stock of several goods from the mirror, in one round trip. `undefined` when the
 * mirror cannot answer (callers ask the object); `null` entries are keys the mirror lacks.
 */
export async function readStocks(config: RedisConfig, goodsIds: number[], options: Options = {}): Promise<(number | null)[] | undefined> {
  if (goodsIds.length === 0) {
    return [];
  }
  try {
    const values = await guarded(config, options, (redis) => redis.mget<unknown[]>(...goodsIds.map(stockKey)));
    const stocks = goodsIds.map((_, i) => toStock(values[i]));
    count('seckill_mirror_operations_total', { operation: 'read_stock', outcome: stocks.includes(null) ? 'miss' : 'ok' });
    return stocks;
  } catch (error) {
    count('seckill_mirror_operations_total', { operation: 'read_stock', outcome: outcomeOf(error) });
    return undefined;
  }
}

export type MirroredResult = ParsedResult & { userId: string };

/**
 * A request's answer from the mirror: its string and its owner in one round trip (MGET).
 * `undefined` when absent, malformed or unreachable. A key of another type (the hash an older
 * build wrote there) reads as nil, so it is absent too, and the caller asks the object.
 */
export async function readResult(config: RedisConfig, requestId: string): Promise<MirroredResult | undefined> {
  try {
    const [value, userId] = await guarded(config, {}, (redis) =>
      redis.mget<unknown[]>(resultKey(requestId), resultOwnerKey(requestId)),
    ).then((r): unknown[] => (Array.isArray(r) ? r : []));
    const parsed = parseResult(value);
    if (!parsed || typeof userId !== 'string' || userId === '') {
      count('seckill_mirror_operations_total', { operation: 'read_result', outcome: 'miss' });
      return undefined;
    }
    count('seckill_mirror_operations_total', { operation: 'read_result', outcome: 'ok' });
    return { ...parsed, userId };
  } catch (error) {
    count('seckill_mirror_operations_total', { operation: 'read_result', outcome: outcomeOf(error) });
    return undefined;
  }
}

/** What the mirror holds for one goods, for reconciliation. */
export type MirrorView = {
  stock: number | null;
  /** A stock shard's part of the stock, when asked for one. */
  part?: number | null;
  users: number;
  goods: Record<string, string>;
};

/** Reads one goods' keys in one pipeline. Throws when Redis cannot answer. */
export async function readMirrorView(config: RedisConfig, goodsId: number, options: Options = {}, part?: string): Promise<MirrorView> {
  return guarded(config, options, async (redis) => {
    const p = redis.pipeline();
    p.get(stockKey(goodsId));
    p.scard(usersKey(goodsId));
    p.hgetall(goodsKey(goodsId));
    if (part !== undefined) {
      p.hget(stockPartsKey(goodsId), part);
    }
    const [stock, users, hash, partValue] = await p.exec<[unknown, unknown, unknown, unknown]>();
    const goods: Record<string, string> = {};
    if (Array.isArray(hash)) {
      for (let i = 0; i + 1 < hash.length; i += 2) {
        goods[String(hash[i])] = String(hash[i + 1]);
      }
    }
    const view: MirrorView = { stock: toStock(stock), users: typeof users === 'number' ? users : Number(users) || 0, goods };
    return part === undefined ? view : { ...view, part: toStock(partValue) };
  });
}
