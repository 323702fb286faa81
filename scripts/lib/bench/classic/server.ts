#!/usr/bin/env tsx
// The classic stack the bench compares against, as the seed projects built it: a Node HTTP
// server that checks the shopper's JWT and runs ONE Redis Lua script (sale window, one unit per
// shopper, stock decrement, and the order pushed onto a Redis list, atomically), and a worker
// that takes orders off the list and writes each one to PostgreSQL with `pg`, as a job queue's
// processor does. Run by classic/index.ts as two processes:
//
//   server.ts api     PORT REDIS_URL, prints "listening <port>"
//   server.ts worker  REDIS_URL DATABASE_URL, prints "working"
//
// Settings come from the environment (CLASSIC_*), see classic/index.ts.
import { createHmac, randomUUID, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';
import pg from 'pg';

/** The Lua script: the whole purchase decision in Redis, atomically. */
export const PURCHASE_LUA = `
local w = redis.call('HMGET', KEYS[3], 'start', 'end')
local now = tonumber(ARGV[2])
if not w[1] or now < tonumber(w[1]) then return -2 end
if now > tonumber(w[2]) then return -3 end
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return -1 end
local s = tonumber(redis.call('GET', KEYS[1]) or '0')
if s <= 0 then return 0 end
redis.call('DECR', KEYS[1])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('LPUSH', KEYS[4], ARGV[3])
return 1`;

/** The Redis keys of one classic sale. */
export function classicKeys(prefix: string, goodsId: number) {
  return {
    stock: `${prefix}:stock:${goodsId}`,
    buyers: `${prefix}:buyers:${goodsId}`,
    window: `${prefix}:window:${goodsId}`,
    queue: `${prefix}:orders`,
    written: `${prefix}:written`,
  };
}

const env = (name: string): string => {
  const v = process.env[name];
  if (!v) {
    throw new Error(`${name} is not set`);
  }
  return v;
};

/** The JWT's subject when its HS256 signature and expiry hold. */
function jwtSubject(header: string | undefined, secret: string): string | undefined {
  const jwt = header?.startsWith('Bearer ') ? header.slice(7) : undefined;
  const [h, p, s] = jwt?.split('.') ?? [];
  if (!h || !p || !s) {
    return undefined;
  }
  const expected = createHmac('sha256', secret).update(`${h}.${p}`).digest();
  const given = Buffer.from(s, 'base64url');
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
    return undefined;
  }
  try {
    const claims: unknown = JSON.parse(Buffer.from(p, 'base64url').toString('utf8'));
    if (typeof claims !== 'object' || claims === null || !('sub' in claims) || typeof claims.sub !== 'string') {
      return undefined;
    }
    const exp = 'exp' in claims && typeof claims.exp === 'number' ? claims.exp : 0;
    return exp * 1000 > Date.now() ? claims.sub : undefined;
  } catch {
    return undefined;
  }
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

const refusal = (code: string, message: string) => ({ error: { code, message, requestId: randomUUID() } });

async function api(): Promise<void> {
  const redis = new Redis(env('CLASSIC_REDIS_URL'));
  const secret = env('CLASSIC_JWT_SECRET');
  const prefix = env('CLASSIC_PREFIX');
  redis.defineCommand('purchase', { numberOfKeys: 4, lua: PURCHASE_LUA });
  const purchase = (keys: string[], args: string[]): Promise<number> =>
    (redis as unknown as { purchase(...a: string[]): Promise<number> }).purchase(...keys, ...args);

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const m = /^\/api\/classic\/purchase\/(\d+)$/.exec(req.url ?? '');
    if (req.method !== 'POST' || !m) {
      send(res, 404, refusal('NOT_FOUND', 'not found'));
      return;
    }
    // The body is not needed: the goods is in the path, the shopper in the JWT.
    req.resume();
    const userId = jwtSubject(req.headers.authorization, secret);
    if (!userId) {
      send(res, 401, refusal('UNAUTHENTICATED', 'a valid JWT is needed'));
      return;
    }
    const goodsId = Number(m[1]);
    const k = classicKeys(prefix, goodsId);
    const requestId = randomUUID();
    const order = JSON.stringify({ requestId, userId, goodsId, at: Date.now() });
    const outcome = await purchase([k.stock, k.buyers, k.window, k.queue], [userId, String(Date.now()), order]);
    switch (outcome) {
      case 1:
        send(res, 202, { requestId, status: 'QUEUED' });
        return;
      case 0:
        send(res, 410, refusal('SOLD_OUT', 'sold out'));
        return;
      case -1:
        send(res, 409, refusal('DUPLICATE', 'one unit per shopper'));
        return;
      default:
        send(res, outcome === -2 ? 425 : 410, refusal(outcome === -2 ? 'NOT_STARTED' : 'ENDED', 'outside the sale window'));
    }
  };
  const server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      process.stderr.write(`classic api: ${String(error)}\n`);
      send(res, 500, refusal('INTERNAL', 'internal error'));
    });
  });
  server.keepAliveTimeout = 60_000;
  server.listen(Number(process.env.CLASSIC_PORT ?? 0), '127.0.0.1', () => {
    const address = server.address();
    process.stdout.write(`listening ${typeof address === 'object' && address ? address.port : 0}\n`);
  });
}

async function worker(): Promise<void> {
  const redis = new Redis(env('CLASSIC_REDIS_URL'));
  const prefix = env('CLASSIC_PREFIX');
  const table = env('CLASSIC_TABLE');
  const db = new pg.Client({ connectionString: env('CLASSIC_DATABASE_URL') });
  await db.connect();
  const k = classicKeys(prefix, 0);
  const insert = `INSERT INTO ${table} (request_id, user_id, goods_id, created_at) VALUES ($1, $2, $3, to_timestamp($4 / 1000.0))
    ON CONFLICT DO NOTHING`;
  process.stdout.write('working\n');
  for (;;) {
    // Up to 100 jobs at a time off the list, each written on its own, as a job processor does.
    const jobs = (await redis.rpop(k.queue, 100)) ?? [];
    if (jobs.length === 0) {
      const one = await redis.brpop(k.queue, 1);
      if (one) {
        jobs.push(one[1]);
      }
    }
    for (const job of jobs) {
      const o = JSON.parse(job) as { requestId: string; userId: string; goodsId: number; at: number };
      await db.query(insert, [o.requestId, o.userId, o.goodsId, o.at]);
    }
    if (jobs.length > 0) {
      await redis.incrby(k.written, jobs.length);
    }
  }
}

const role = process.argv[2];
const isMain = process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href;
if (isMain && (role === 'api' || role === 'worker')) {
  (role === 'api' ? api() : worker()).catch((error: unknown) => {
    process.stderr.write(`classic ${role}: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  });
}
